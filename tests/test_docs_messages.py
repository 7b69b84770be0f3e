"""Error messages and docstrings say what they mean (the user-facing wording, not the numbers)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import jln


@pytest.mark.parametrize("axis, where", [(-1, "axis 2"), ((1, 2), "axes 1, 2")])
def test_scale_shape_error_reads_axes_as_axes(axis: int | tuple[int, ...], where: str) -> None:
    x = jnp.ones((2, 4, 3), jnp.float32)
    axes = (2,) if axis == -1 else (1, 2)
    expected = tuple(x.shape[a] for a in axes)
    with pytest.raises(ValueError) as info:
        jln.layer_norm(x, jnp.ones((5,), jnp.float32), axis=axis)
    msg = str(info.value)
    assert f"must have shape {expected}" in msg and f"normalized {where}" in msg, msg
    assert "received scale.shape=(5,) for x.shape=(2, 4, 3)" in msg, msg


def test_split_condition_documents_its_type_error() -> None:
    with pytest.raises(TypeError):
        jln.split_condition(jnp.arange(4))
    doc = jln.split_condition.__doc__ or ""
    assert "TypeError" in doc.split("Raises:")[1].split("Example:")[0]


def test_shard_chunks_example_uses_the_public_name() -> None:
    doc = jln.shard_chunks.__doc__ or ""
    assert "jln._distributed" not in doc and "jln.shard_chunks(" in doc


@pytest.mark.parametrize("call, fix", [
    (lambda x: jln.layer_norm(x, 1e-6), "jln.layer_norm(x, eps=1e-06)"),
    (lambda x: jln.rms_norm(x, 1e-5), "jln.rms_norm(x, eps=1e-05)"),
    (lambda x: jln.layer_norm(x, None, 1e-6), "jln.layer_norm(x, eps=1e-06)"),
    (lambda x: jln.add_rms_norm(x, x, 1e-6), "jln.add_rms_norm(x, residual, eps=1e-06)"),
])
def test_positional_eps_says_eps_is_keyword_only(call: object, fix: str) -> None:
    with pytest.raises(TypeError) as info:
        call(jnp.ones((2, 8), jnp.float32))  # type: ignore[operator]
    msg = str(info.value)
    assert "eps is keyword-only" in msg and fix in msg, msg


def test_every_rms_norm_convention_and_alias_is_documented() -> None:
    from jln.families.rms_norm import spec as contract

    doc = (jln.rms_norm.__doc__ or "") + (contract.__doc__ or "")
    for name, (aliases, _) in contract.CONVENTIONS.items():
        for spelling in (name, *aliases):
            assert f'"{spelling}"' in doc or f"``{spelling}``" in doc, spelling
