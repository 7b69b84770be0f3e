"""Which native CPU kernels serve a family: dispatch's one entry to them.

LayerNorm and RMSNorm (with their adaptive and fused-residual forms) are :mod:`jln.kernels._cpu`'s,
gated RMSNorm :mod:`jln.kernels._cpu_gated`'s; both load from the one library ``jln build``
makes. A family without a native kernel runs on the XLA path.
"""

from __future__ import annotations

from typing import Any

from jln._contract import NormSpec
from jln.kernels import _cpu, _cpu_gated

#: kernel (a family's ``NormSpec.native``) -> the module with its ``run`` and ``unsupported_reason``
MODULES: dict[str, Any] = {"norm": _cpu, "gated": _cpu_gated}


def unsupported_reason(spec: NormSpec, x: Any, operands: tuple[Any, ...], backend: str | None = None) -> str | None:
    """``None`` when a native CPU kernel handles this call, else a sentence saying why not."""
    module = MODULES.get(spec.native or "")
    if module is None:
        return f"no native CPU kernel for {spec.op!r} yet (it runs on the XLA path)"
    return module.unsupported_reason(spec, x, operands, backend)  # type: ignore[no-any-return]


def run(spec: NormSpec, x: Any, operands: tuple[Any, ...], addends: tuple[Any, Any] | None = None) -> Any:
    """The native path of ``spec.body(x, *operands)`` (see each module's ``run``)."""
    return MODULES[str(spec.native)].run(spec, x, operands, addends)
