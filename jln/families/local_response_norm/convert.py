"""The torch -> jln converter of ``torch.nn.LocalResponseNorm``.
"""

from __future__ import annotations

from typing import Any

from jln import _convert as C


def _conv_lrn(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    opts = dict(size=int(m.size), alpha=float(m.alpha), beta=float(m.beta), k=float(m.k))
    return C.Spec("LocalResponseNorm", {}, (), opts), {}


LAYOUTS: dict[str, C.Layout] = {
    "LocalResponseNorm": C.Layout("LocalResponseNorm", lambda p: {}),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter("torch.nn.LocalResponseNorm", "LocalResponseNorm", C.torch_nn("LocalResponseNorm"), _conv_lrn,
                LAYOUTS["LocalResponseNorm"]),
)
