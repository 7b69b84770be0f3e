"""The README's ```python blocks run as written (```py blocks are fragments and are skipped)."""

from __future__ import annotations

import pathlib
import re

import jax
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_block_runs(i):
    pytest.importorskip("torch")
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        exec(compile(BLOCKS[i], f"README.md block {i}", "exec"), {})


def test_readme_has_blocks():
    assert len(BLOCKS) >= 4


def test_readme_is_short():
    """The README is an overview; guides and measurements belong in docs/ and bench/."""
    size = README.stat().st_size
    assert size <= 15_000, f"README.md is {size} bytes, over 15,000: move detail into docs/"


def test_readme_says_which_functions_take_axis_eps_impl_and_axis_name():
    # the README's "Functions" paragraph, as data: which of the four options each function takes
    import inspect

    import jln

    said = {
        **dict.fromkeys(("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "gated_rms_norm",
                         "adaptive_layer_norm"), {"axis", "eps", "impl", "axis_name"}),
        "adaptive_rms_norm": {"eps", "impl", "axis_name"},
        "batch_norm": {"channel_axis", "eps", "impl", "axis_name"},
        "instance_norm": {"channel_axis", "eps", "impl"}, "group_norm": {"channel_axis", "eps", "impl"},
        "frozen_batch_norm": {"channel_axis", "eps"}, "local_response_norm": {"channel_axis"},
        "lp_normalize": {"axis", "eps"}, "global_response_norm": {"eps"},
        "dyt": {"axis"}, "affine": {"axis"}, "poly_norm": {"axis", "eps"},
    }
    readme = README.read_text(encoding="utf-8")
    for name, options in said.items():
        params = set(inspect.signature(getattr(jln, name)).parameters)
        assert params & {"axis", "eps", "impl", "axis_name", "channel_axis"} == options, name
        assert f"`{name}`" in readme or name.startswith("add_"), name
