"""Every op and convention in the registry against its torch reference, forward and backward.

Rule (jln/_compare.py): |jln - ref64| <= 2 |torch - ref64| + atol, ref64 being the torch
reference in float64 on the same rounded inputs; named conventions in bfloat16 are also
bit-exact on >= 99.5% of elements and never more than 1 ulp off.
"""

from __future__ import annotations

import numpy as np
import pytest

from jln import _compare, _index, _registry

from ._util import check, cotangent, jln_vjp, torch_vjp, x64_if

torch = pytest.importorskip("torch")

# (shape, k = number of trailing normalized axes)
SHAPES = [((3, 5, 48), 1), ((2, 3000), 1), ((6, 1), 1), ((0, 8), 1), ((2, 3, 4, 8), 2)]


def _fast(dtype: str, shape: tuple[int, ...], k: int, impl: str) -> bool:
    """The default run's slice of the grid: every op, dtype and parameter dtype on the first
    shape with the default impl, the other shapes (wide, width 1, empty, two axes) in float32,
    and ``impl="xla"`` on the first shape in float32; the whole grid runs with --run-slow."""
    first = (shape, k) == SHAPES[0]
    if impl == "xla":
        return dtype == "float32" and first
    return dtype == "float32" or first


def _cases():
    for op in _index.OPS:
        for dtype in _registry.DTYPES:
            pdts = [dtype]
            if dtype in ("bfloat16", "float16") and op.params:
                pdts.append("float32")  # half activations with float32 checkpoints
            # impl="auto" is what users get (on CPU: the native kernels where they apply);
            # impl="xla" keeps the XLA path itself under the torch rule too
            impls = ["auto"] + (["xla"] if op.takes_impl and dtype != "float64" else [])
            for pdt in pdts:
                for shape, k in SHAPES:
                    if (k > 1 and not op.multi_axis) or len(shape) < op.min_rank:
                        continue
                    for impl in impls:
                        marks = () if _fast(dtype, shape, k, impl) else (pytest.mark.slow,)
                        yield pytest.param(op, dtype, pdt, shape, k, impl, marks=marks,
                                           id=f"{op.name}-{dtype}-p{pdt}-{'x'.join(map(str, shape))}-k{k}-{impl}")


CASES = list(_cases())


def _impl(op, impl):
    return {"impl": impl} if op.takes_impl else {}


@pytest.mark.parametrize("op,dtype,pdt,shape,k,impl", CASES)
def test_forward(op, dtype, pdt, shape, k, impl):
    with x64_if(dtype):
        inputs = op.make_inputs(shape, k, dtype, pdt)
        outs = op.call_jln(inputs, k, **_impl(op, impl))
        touts = op.call_torch(_registry.to_torch(inputs), k)
        refs = op.call_torch(_registry.to_float64_torch(inputs), k)
        assert len(outs) == len(touts)
        for i, (o, t, r) in enumerate(zip(outs, touts, refs, strict=True)):
            assert o.shape == tuple(t.shape)
            assert str(o.dtype) == str(t.dtype).removeprefix("torch."), f"output {i} dtype"
            check(o, t, r, exact=op.exact and pdt == dtype, what=f"{op.name} output {i}")


def _grad_names(op):
    names = ["x", *op.params]
    names += [n for n in op.extra if n != "emb"]
    if "emb" in op.extra:
        names.append("emb")
    return tuple(names)


def _backward_cases():
    """The forward grid, the wide shape in float32 only; by default float32 and
    bfloat16 only (float16 and float64 gradients run in the slow pass)."""
    for c in CASES:
        dtype, shape = c.values[1], c.values[3]
        if shape == (2, 3000) and dtype != "float32":
            continue
        slow = (pytest.mark.slow,) if dtype in ("float16", "float64") else ()
        yield pytest.param(*c.values, marks=(*c.marks, *slow), id=c.id)


@pytest.mark.parametrize("op,dtype,pdt,shape,k,impl", list(_backward_cases()))
def test_backward(op, dtype, pdt, shape, k, impl):
    with x64_if(dtype):
        inputs = op.make_inputs(shape, k, dtype, pdt)
        names = _grad_names(op)
        outs = op.call_jln(inputs, k, **_impl(op, impl))
        cts = [cotangent(o.shape, o.dtype, seed=i + 1) for i, o in enumerate(outs)]
        g = jln_vjp(op, inputs, k, names, cts, **_impl(op, impl))
        tg = torch_vjp(op, _registry.to_torch(inputs), k, names, cts)
        rg = torch_vjp(op, _registry.to_float64_torch(inputs), k, names, cts)
        for n in names:
            assert g[n].shape == tuple(tg[n].shape) and str(g[n].dtype) == str(tg[n].dtype).removeprefix("torch.")
            atol = max(_compare.ATOL[str(g[n].dtype)], op.grad_atol(inputs, k))
            check(g[n], tg[n], rg[n], what=f"{op.name} d{n}", atol=atol)


def test_registry_covers_every_public_function_and_convention():
    import jln

    families = {op.family for op in _index.OPS}
    # every public function that computes a norm has its entries (and its reference): the
    # constants and helpers aside
    helpers = {"CONVENTIONS", "ORDERS", "GATED_CONVENTIONS", "RunningStats", "shard_chunks", "split_condition",
               "Quant", "Quantized", "Stats"}
    assert families == set(jln.__all__) - helpers, set(jln.__all__) - helpers ^ families
    assert set(_index.FUNCTIONS) == families
    conventions = {op.options.get("convention") for op in _index.OPS if op.family == "rms_norm"}
    assert conventions == set(jln.CONVENTIONS)
    orders = {op.options.get("order") for op in _index.OPS if op.family == "adaptive_layer_norm"}
    assert {"seed", "dit", "continuous"} <= orders


def test_planted_error_is_caught():
    """The rule rejects an output one bf16 ulp off on every element (it must be able to fail)."""
    op = _index.BY_NAME["rms_norm[llama]"]
    inputs = op.make_inputs((4, 64), 1, "bfloat16")
    (o,) = op.call_jln(inputs)
    (t,) = op.call_torch(_registry.to_torch(inputs))
    (r,) = op.call_torch(_registry.to_float64_torch(inputs))
    o = np.asarray(o)
    bumped = (o.view(np.int16) + 1).view(o.dtype)  # one ulp away from zero, every element
    assert check(o, t, r, exact=True).passed
    with pytest.raises(AssertionError):
        check(bumped, t, r, exact=True)


@pytest.mark.parametrize("impl", ["auto", "xla"])
@pytest.mark.parametrize("op", [op for op in _index.OPS if op.exact], ids=lambda op: op.name)
def test_bitexact_under_jit(op, impl):
    """Inside jit XLA may skip rounding a fused bf16 input (excess precision); jln restores it."""
    import jax

    inputs = op.make_inputs((4, 16, 64), 1, "bfloat16")
    outs = jax.jit(lambda a: op.call_jln(a, **_impl(op, impl)))(inputs)
    for o, t in zip(outs, op.call_torch(_registry.to_torch(inputs)), strict=True):
        rep = _compare.compare(o, t, None, exact=True)
        assert rep.passed, rep
