"""``jln.testing``: the assertions pass on true pairs and fail, usefully, on wrong ones."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jln  # noqa: E402
from jln.testing import (  # noqa: E402
    ParityError,
    assert_matches_torch,
    assert_module_matches_torch,
    check_matches_torch,
    check_module_matches_torch,
)

F = torch.nn.functional


def torch_ln(x, w, b):  # noqa: ANN001, ANN201
    return F.layer_norm(x, x.shape[-1:], w, b, 1e-5)


def test_layer_norm_matches_torch_fwd_and_bwd_across_dtypes() -> None:
    res = assert_matches_torch(
        lambda x, w, b: jln.layer_norm(x, w, b, eps=1e-5), torch_ln, shapes=[(4, 32), (32,), (32,)]
    )
    assert {r.dtype for r in res} == {"float32", "bfloat16", "float16"}
    assert {(r.direction, r.output) for r in res} == {
        ("fwd", "out"), ("bwd", "d arg0"), ("bwd", "d arg1"), ("bwd", "d arg2")}
    assert all(r.passed for r in res)


def test_float64_reference_mode_and_x64() -> None:
    with jax.enable_x64(True):
        res = assert_matches_torch(
            lambda x, w, b: jln.layer_norm(x, w, b), torch_ln, shapes={"x": (3, 16), "w": (16,), "b": (16,)},
            dtypes=("float32", "float64", "bfloat16"), reference="float64",
        )
    assert {r.dtype for r in res} == {"float32", "float64", "bfloat16"}
    assert all(r.report.torch_err >= 0 and r.report.bound >= r.report.torch_err * 2 for r in res)


def test_float64_without_x64_is_a_clear_error() -> None:
    if jax.config.jax_enable_x64:
        pytest.skip("x64 is on in this session")
    with pytest.raises(ValueError, match="jax_enable_x64"):
        assert_matches_torch(jnp.sin, torch.sin, shapes=[(3,)], dtypes=("float64",))


def test_wrong_eps_raises_with_actionable_message() -> None:
    with pytest.raises(ParityError) as info:
        assert_matches_torch(
            lambda x, w, b: jln.layer_norm(x, w, b, eps=1e-2), torch_ln,
            shapes=[(4, 32), (32,), (32,)], dtypes=("float32",), name="my_layer_norm",
        )
    msg = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert "my_layer_norm" in msg and "dtype=float32" in msg and "shape=(4, 32)" in msg
    assert "max_abs_err=" in msg and "bound " in msg and "max_ulp=" in msg and "frac_bitexact=" in msg
    assert "fwd out" in msg
    # the numbers in the message are the measured ones
    bad = [r for r in info.value.results if not r.passed]
    assert bad and all(r.report.max_abs_err > r.report.bound for r in bad)


def _llama(d: int) -> torch.nn.Module:
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    m = modeling_llama.LlamaRMSNorm(d, eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(1 + 0.1 * torch.randn(d, generator=torch.Generator().manual_seed(0)))
    return m


def _llama_fn(m: torch.nn.Module):  # noqa: ANN202
    return lambda x, w: torch.func.functional_call(m, {"weight": w}, (x,))


def test_rms_norm_llama_matches_transformers_bit_exact_in_bf16() -> None:
    m = _llama(64)
    w = m.weight.detach().numpy()
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    res = assert_matches_torch(
        lambda x, w: jln.rms_norm(x, w, convention="llama", eps=1e-6), _llama_fn(m),
        inputs=[x, w], dtypes=("float32", "bfloat16", "float16"), exact=True,
    )
    bf16 = [r for r in res if r.dtype == "bfloat16" and r.direction == "fwd"]
    assert bf16 and bf16[0].exact_rule and bf16[0].max_ulp_elementwise <= 1 and bf16[0].max_ulp <= 1


def test_convention_swap_is_caught_in_bf16() -> None:
    m = _llama(256)
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    with pytest.raises(ParityError, match="dtype=bfloat16") as info:
        assert_matches_torch(
            lambda x, w: jln.rms_norm(x, w, convention="torch", eps=1e-6), _llama_fn(m),
            inputs=[x, m.weight.detach().numpy()], dtypes=("bfloat16",), exact=True, grad=False,
        )
    assert "half-precision bit-exact rule" in str(info.value)


def test_one_ulp_off_is_caught_by_the_exact_rule() -> None:
    def off(x):  # noqa: ANN001, ANN202
        y = jln.rms_norm(x, convention="llama", eps=1e-6)
        return jnp.nextafter(y, jnp.asarray(jnp.inf, y.dtype))

    with pytest.raises(ParityError, match="elementwise 1\\)"):
        assert_matches_torch(off, lambda x: _llama_fn(_llama(16))(x, torch.ones(16, dtype=x.dtype)),
                             shapes=[(4, 16)], dtypes=("bfloat16",), exact=True, grad=False)


def test_wrong_output_dtype_is_reported() -> None:
    with pytest.raises(ParityError, match="dtype mismatch: jax gives float32, torch gives bfloat16"):
        assert_matches_torch(lambda x: jnp.tanh(x.astype(jnp.float32)), torch.tanh, shapes=[(3, 5)],
                             dtypes=("bfloat16",), grad=False)


def test_gradient_mismatch_alone_is_caught() -> None:
    @jax.custom_vjp
    def sin(x):  # noqa: ANN001, ANN202
        return jnp.sin(x)

    sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x) * 1.01,))
    with pytest.raises(ParityError) as info:
        assert_matches_torch(sin, torch.sin, shapes=[(8,)], dtypes=("float32",))
    bad = [r for r in info.value.results if not r.passed]
    assert [(r.direction, r.output) for r in bad] == [("bwd", "d arg0")]


def test_tuple_outputs_mapping_inputs_and_torch_tensors() -> None:
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    r = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))

    def t_add_ln(x, residual):  # noqa: ANN001, ANN202
        s = x + residual
        return F.layer_norm(s, s.shape[-1:]), s

    res = assert_matches_torch(lambda x, residual: jln.add_layer_norm(x, residual), t_add_ln,
                               inputs={"x": x, "residual": r})
    assert {r.output for r in res} == {"out[0]", "out[1]", "d x", "d residual"}


def test_argument_errors() -> None:
    with pytest.raises(TypeError, match="exactly one of `inputs`"):
        assert_matches_torch(jnp.sin, torch.sin)
    with pytest.raises(TypeError, match="exactly one of `inputs`"):
        assert_matches_torch(jnp.sin, torch.sin, inputs=[np.zeros(3, np.float32)], shapes=[(3,)])
    with pytest.raises(ValueError, match="reference"):
        check_matches_torch(jnp.sin, torch.sin, inputs=[np.zeros(3, np.float32)], reference="exact")
    with pytest.raises(TypeError, match="floating"):
        assert_matches_torch(jnp.sin, torch.sin, shapes=[(3,)], dtypes=("int32",))
    with pytest.raises(TypeError, match=r"one shape \(a tuple of sizes\) per argument.*\[16\]"):
        assert_matches_torch(jnp.sin, torch.sin, shapes=[16])


def test_atol_override_loosens_the_bound() -> None:
    res = assert_matches_torch(
        lambda x: jln.layer_norm(x, eps=1e-3), lambda x: F.layer_norm(x, x.shape[-1:], eps=1e-5),
        shapes=[(2, 16)], dtypes=("float32",), atol=1e-1, grad=False,
    )
    assert res[0].report.bound >= 1e-1


def _random_layer_norm(d: int):  # noqa: ANN202
    """A torch LayerNorm with random affine parameters, and those parameters as jln's tree."""
    tm = torch.nn.LayerNorm(d)
    with torch.no_grad():
        tm.weight.normal_(1.0, 0.1, generator=torch.Generator().manual_seed(0))
        tm.bias.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(1))
    return tm, {"scale": jnp.asarray(tm.weight.detach().numpy()), "bias": jnp.asarray(tm.bias.detach().numpy())}


def test_module_matches_torch_linen_pair_and_nnx() -> None:
    linen = pytest.importorskip("jln.linen")
    nnx_mod = pytest.importorskip("jln.nnx")
    tm, params = _random_layer_norm(16)
    assert_module_matches_torch(tm, (linen.LayerNorm(), {"params": params}), shapes=[(2, 3, 16)],
                                dtypes=("float32", "bfloat16"))
    from flax import nnx

    nm = nnx_mod.LayerNorm(16)
    nnx.update(nm, nnx.State({"scale": nnx.Param(params["scale"]), "bias": nnx.Param(params["bias"])}))
    assert_module_matches_torch(tm, nm, shapes=[(2, 16)])
    # wrong weights are caught
    with pytest.raises(ParityError, match="LayerNorm"):
        assert_module_matches_torch(tm, (linen.LayerNorm(), {"params": {**params, "bias": params["bias"] + 0.1}}),
                                    shapes=[(2, 16)])


def test_module_conversion_is_automatic_when_interop_exists() -> None:
    pytest.importorskip("jln.interop")
    m = _llama(32)
    res = assert_module_matches_torch(m, shapes=[(2, 32)], dtypes=("float32", "bfloat16"), exact=True)
    assert {r.dtype for r in res} == {"float32", "bfloat16"}


def test_bad_module_argument() -> None:
    with pytest.raises(TypeError, match="linen_module, variables"):
        assert_module_matches_torch(torch.nn.LayerNorm(4), object(), shapes=[(2, 4)])


@pytest.mark.slow
def test_module_inputs_by_keyword_with_a_padding_mask() -> None:
    pytest.importorskip("jln.interop")
    tm = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0)
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    mask = np.zeros((2, 5), bool)
    mask[0, 3:] = True
    res = assert_module_matches_torch(tm, inputs={"src": x, "src_key_padding_mask": mask})
    # the output, d src, and every parameter's gradient under torch's name
    assert {r.output for r in res} == {"out", "d src"} | {f"d {k}" for k, _ in tm.named_parameters()}
    from jln.interop import from_torch

    res = assert_module_matches_torch(tm, from_torch(tm, api="nnx"), inputs={"src": x, "src_key_padding_mask": mask})
    assert all(r.passed for r in res)
    # the mask reaches both sides: a different mask on the jln side is caught
    lin, v = from_torch(tm)
    with pytest.raises(ParityError):
        assert_module_matches_torch(
            tm, (_Unmasked(lin), v), inputs={"src": x, "src_key_padding_mask": mask}, grad=False)


class _Unmasked:
    """A linen module stand-in that drops the padding mask (a port that forgot it)."""

    def __init__(self, m) -> None:  # noqa: ANN001
        self.m = m

    def apply(self, v, src, src_key_padding_mask=None):  # noqa: ANN001, ANN201
        return self.m.apply(v, src)


def test_nan_and_infinities_must_match_in_kind_and_sign() -> None:
    from jln import _compare

    nan_inf = np.array([np.nan, 1.0], np.float32), np.array([np.inf, 1.0], np.float32)
    assert not _compare.compare(*nan_inf).passed
    assert not _compare.compare(np.array([-np.inf, 1], np.float32), np.array([np.inf, 1], np.float32)).passed
    assert not _compare.compare(np.array([np.inf, 1], np.float32), np.array([3e38, 1], np.float32)).passed
    both = np.array([np.nan, -np.inf, np.inf, 2.0], np.float32)
    assert _compare.compare(both, both.copy()).passed
    with pytest.raises(ParityError, match=r"NaN/Inf differ from torch's at 1 element"):
        assert_matches_torch(lambda a: a * jnp.array([jnp.nan, 1, 1, 1]),
                             lambda a: a * torch.tensor([float("inf"), 1, 1, 1]),
                             inputs=[np.ones(4, np.float32)], grad=False)


def test_parameter_gradients_are_compared_under_torch_names() -> None:
    linen = pytest.importorskip("jln.linen")
    import flax.linen as nn

    tm, params = _random_layer_norm(16)
    res = assert_module_matches_torch(tm, (linen.LayerNorm(), {"params": params}), shapes=[(3, 16)],
                                      dtypes=("float32", "bfloat16"), reference="float64" if jax.config.jax_enable_x64 else "torch")
    assert {(r.dtype, r.output) for r in res if r.direction == "bwd"} == {
        (d, o) for d in ("float32", "bfloat16") for o in ("d arg0", "d weight", "d bias")}

    class FrozenScale(linen.LayerNorm):
        """Right forward, no gradient for the scale (a port that stops it by mistake)."""

        @nn.compact
        def __call__(self, x):  # noqa: ANN001, ANN204
            scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
            bias = self.param("bias", nn.initializers.zeros, (x.shape[-1],))
            return jln.layer_norm(x, jax.lax.stop_gradient(scale), bias)

    with pytest.raises(ParityError) as info:
        assert_module_matches_torch(tm, (FrozenScale(), {"params": params}), shapes=[(3, 16)])
    bad = [(r.direction, r.output) for r in info.value.results if not r.passed]
    assert bad == [("bwd", "d weight")]


@pytest.mark.parametrize("reference", ["torch", "float64"])
def test_failure_message_names_what_the_error_is_against(reference: str) -> None:
    # with reference="torch" there is no float64 reference, so no "torch's own error" against it
    with jax.enable_x64(True), pytest.raises(ParityError) as info:
        assert_matches_torch(lambda x, w, b: jln.layer_norm(x, w, b, eps=1e-1), torch_ln,
                             shapes=[(4, 32), (32,), (32,)], dtypes=("float32",), reference=reference, grad=False)
    msg = str(info.value)
    if reference == "torch":
        assert "|jax - torch|" in msg and "own error" not in msg and "float64" not in msg, msg
    else:
        assert "vs the float64 reference" in msg and "torch's own error against it" in msg, msg


def test_check_and_assert_take_the_same_arguments() -> None:
    import inspect

    for check, assert_ in ((check_matches_torch, assert_matches_torch),
                           (check_module_matches_torch, assert_module_matches_torch)):
        a, b = inspect.signature(check).parameters, inspect.signature(assert_).parameters
        assert list(a) == list(b), (check.__name__, list(a), list(b))
        assert all(a[k].kind == b[k].kind and a[k].default == b[k].default for k in a)
        # keyword-only after the functions (or the modules)
        assert [k for k, v in a.items() if v.kind is not inspect.Parameter.KEYWORD_ONLY] == list(a)[:2]


def test_check_sweeps_shapes_and_dtypes_and_does_not_raise() -> None:
    res = check_matches_torch(lambda x: jln.layer_norm(x, eps=1e-1), lambda x: F.layer_norm(x, x.shape[-1:], eps=1e-5),
                              shapes=[(3, 16)], dtypes=("float32", "bfloat16"), grad=False)
    assert [(r.dtype, r.passed) for r in res] == [("float32", False), ("bfloat16", False)]
    res = check_module_matches_torch(torch.nn.LayerNorm(8), shapes=[(2, 8)])
    assert res and all(r.passed for r in res)
    with pytest.raises(TypeError):
        check_matches_torch(jnp.sin, torch.sin, [np.zeros(3, np.float32)])  # type: ignore[misc]


def test_parity_result_measures_are_public_properties() -> None:
    # one element near zero, one large, in one row: jax differs from torch by 1e-6 at the small one
    x = np.array([[1e-30, 3.0]], np.float32)
    ref = np.sin(x.astype(np.float64))
    (r,) = check_matches_torch(lambda a: jnp.sin(a) + jnp.array([[1e-6, 0.0]], jnp.float32), torch.sin,
                               inputs=[x], grad=False)
    got = np.sin(x) + np.array([1e-6, 0.0], np.float32)
    assert r.max_abs_err == pytest.approx(float(np.max(np.abs(got.astype(np.float64) - np.sin(x).astype(np.float64)))))
    assert r.max_rel_err == pytest.approx(r.max_abs_err / float(np.max(np.abs(np.sin(x)))))
    assert r.max_rel_err == pytest.approx(1e-6 / ref[0, 1], rel=1e-3)
    # elementwise, 1e-6 against 1e-30 is ~1e9 float32 ulps; at the row's scale (sin 3 = 0.14,
    # whose float32 ulp is 2**-26) it is 1e-6 / 2**-26 = 67 ulps
    assert r.max_ulp_elementwise > 10**8
    assert r.max_ulp == pytest.approx(1e-6 / 2.0**-26, rel=1e-3)
    assert r.frac_bitexact == 0.5 and r.torch_err == 0.0 and r.bound > 0 and not r.exact_rule
    d = r.as_dict()
    assert d["max_ulp"] == pytest.approx(r.max_ulp) and d["max_ulp_elementwise"] == r.max_ulp_elementwise
    assert d["max_rel_err"] == pytest.approx(r.max_rel_err)
