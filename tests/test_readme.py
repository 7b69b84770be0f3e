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
