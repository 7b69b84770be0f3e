"""The contract every implementation of a norm family honours, one module per family.

A family is a frozen spec (:class:`NormSpec`): the options of one call after validation, built
once by the public function and carried unchanged through dispatch, the XLA body and every
kernel backend. The spec states the formula (:meth:`NormSpec.formula`, the XLA body), the
epilogue after the statistics (:meth:`NormSpec.tail`, which the kernels run too, so no
convention's rounding is written twice) and the result dtype. Kernels read a family's
statistics from :attr:`NormSpec.centered` and answer for the families they know; a new family
is a new module here, its public function and a registry entry.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from jln import _stats

Array = jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class NormSpec:
    """Everything static about one call of a norm: hashable, so it keys compiled programs and
    rides on primitives as a parameter.

    ``axes`` are the normalized axes (sorted, non-negative), ``eps`` is added inside the square
    root, ``axis_name``/``axis_index_groups`` name the mapped axes across which the normalized
    axes are split (``None``: each row is local).
    """

    axes: tuple[int, ...]
    eps: float
    axis_name: Any = None
    axis_index_groups: Any = None

    #: The family's name, as the registry and the kernels know it.
    op: ClassVar[str] = ""
    #: The operand slots after ``x``, in order (each may be ``None``).
    operands: ClassVar[tuple[str, ...]] = ()
    #: Whether the statistics are centred (LayerNorm: mean and variance) or not (RMS).
    centered: ClassVar[bool] = False
    #: Whether the Pallas kernels compute the family (:mod:`jln.kernels`).
    pallas: ClassVar[bool] = False
    #: Whether ``impl="auto"`` may take the Pallas kernels for it (where they compile natively
    #: and were timed on that hardware; otherwise only ``impl="pallas"`` runs them).
    pallas_auto: ClassVar[bool] = False
    #: The native CPU kernel that computes the family (``"norm"``: LayerNorm/RMSNorm, ``"gated"``:
    #: gated RMSNorm; :mod:`jln.kernels._native`), or ``None``.
    native: ClassVar[str | None] = None

    def formula(self, x: Array, *operands: Array | None) -> Array:
        raise NotImplementedError

    def tail(self, y: Array, *operands: Array | None) -> Array:
        """Everything after the normalized row ``y`` (statistics dtype): affine, rounding."""
        raise NotImplementedError

    def pre(self, x: Array, *operands: Array | None) -> Array:
        """The row whose statistics are taken, from ``x`` in the statistics dtype: ``x`` itself
        unless :meth:`has_pre` (gated RMSNorm's gate first: ``x * a(z)``). The kernels run it
        before their statistics and differentiate it after them."""
        return x

    def has_pre(self, present: tuple[str, ...]) -> bool:
        """Whether :meth:`pre` changes ``x`` when the operands named in ``present`` are given."""
        return False

    @property
    def result_dtype(self) -> jnp.dtype:
        raise NotImplementedError

    def kernel_reason(self) -> str | None:
        """Why no kernel (Pallas or native) computes this spec, or ``None`` when the kernels
        may: dispatch asks it first, so ``impl="auto"`` takes the XLA path for such a spec and
        ``impl="pallas"``/``"native"`` refuse it with this reason."""
        return None

    #: The fields holding axes of ``x`` (remapped when :meth:`body` drops unit axes).
    axis_fields: ClassVar[tuple[str, ...]] = ("axes",)

    def row_stats(self, x: Array, *operands: Array | None) -> tuple[Array | None, Array]:
        """``(mean, rstd)`` of ``x``'s rows in the statistics dtype, keepdims (``mean`` is
        ``None`` for uncentred families): what ``return_stats=True`` returns."""
        raise NotImplementedError

    def body(self, x: Array, *operands: Array | None) -> Array:
        """The XLA body: :meth:`formula` under the remat policy, so reverse mode keeps ``x`` (own
        dtype), the operands and the named per-row statistics, nothing else. Size-1 axes are
        dropped first and restored after (the same numbers: XLA:CPU's reverse mode is several
        times slower with a unit axis among the rows, e.g. ``(B, 1, D)``)."""
        squeezed = self._without_unit_axes(x, operands)
        if squeezed is not None:
            spec, units, xs, ops = squeezed
            out = spec._body(xs, *ops)
            return jax.tree.map(lambda a: jnp.expand_dims(a, units) if a.ndim == xs.ndim else a, out)
        return self._body(x, *operands)

    def _without_unit_axes(
        self, x: Array, operands: tuple[Array | None, ...]
    ) -> tuple[NormSpec, tuple[int, ...], Array, tuple[Array | None, ...]] | None:
        """``(spec, units, x, operands)`` with the size-1 axes ``units`` of ``x`` squeezed out of
        ``x``, the operands (broadcast against ``x``) and the spec's axes (normalized size-1 axes
        too, unless no normalized axis would remain); ``None`` when there are none or an operand
        does not broadcast into ``x`` as it is."""
        nd = x.ndim
        units = tuple(i for i, n in enumerate(x.shape) if n == 1)
        if any(all(a in units for a in (getattr(self, f) or ())) for f in self.axis_fields if getattr(self, f)):
            units = tuple(i for i in units if i not in self.axes)  # keep a normalized axis
        if not units or len(units) == nd:
            return None
        ops: list[Array | None] = []
        for o in operands:
            if o is None:
                ops.append(None)
                continue
            lead = nd - o.ndim
            if lead < 0 or any(o.shape[i - lead] != 1 for i in units if i >= lead):
                return None
            ops.append(jnp.squeeze(o, tuple(i - lead for i in units if i >= lead)))
        new = {a: a - sum(u < a for u in units) for a in range(nd) if a not in units}

        def remap(v: Any) -> Any:
            return v if v is None else tuple(new[a] for a in v if a in new)

        spec = dataclasses.replace(self, **{f: remap(getattr(self, f)) for f in self.axis_fields})  # type: ignore[arg-type]
        return spec, units, jnp.squeeze(x, units), tuple(ops)

    def _body(self, x: Array, *operands: Array | None) -> Array:
        if self.axis_name is not None and type(x).__name__ == "BatchTracer":
            # under vmap (its named axis, as axis_name), jax.checkpoint's partial evaluation
            # traces the statistics' derivative rule (its psum) where that axis is no longer
            # bound (grad of a jit of the vmap raised NameError): the formula runs unwrapped
            # there, the numbers the same (reverse mode then keeps what XLA chooses). jax has no
            # public name for its vmap tracers, hence the class name.
            return self.formula(x, *operands)
        return jax.checkpoint(self.formula, policy=_stats.REMAT_POLICY)(x, *operands)

    def on_rows(self, ndim: int) -> NormSpec:
        """This spec for the kernels' layout: ``x`` of rank ``ndim`` normalized over its last
        axis, each row local."""
        return dataclasses.replace(self, axes=(ndim - 1,), axis_name=None, axis_index_groups=None)

    def with_axis_name(self, axis_name: Any) -> NormSpec:
        """This spec on the local blocks of a ``shard_map`` whose mesh axes ``axis_name`` split
        the normalized axes (``None``: only the rows are split)."""
        return dataclasses.replace(self, axis_name=axis_name, axis_index_groups=None)


def rows_and_width(shape: Sequence[int], n_axes: int) -> tuple[int, int]:
    """``(rows, n)`` of an array of ``shape`` whose last ``n_axes`` axes are normalized: the
    layout every kernel takes (``[rows, n]``)."""
    k = len(shape) - n_axes
    return math.prod(shape[:k]), math.prod(shape[k:])


def add_in(x: Array, residual: Array, dtype: Any) -> Array:
    """``x + residual`` computed in ``dtype``: the residual step of ``add_*_norm`` (the kernels'
    forward-mode tangent of the fused add uses it too)."""
    return x.astype(dtype) + residual.astype(dtype)
