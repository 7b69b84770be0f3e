"""The documentation's ```python blocks run as written, and the API reference covers the public API.

Each page's blocks run in order in one namespace (a later block may use an earlier one's names),
as a reader following the page would run them. ```py blocks are fragments and are skipped.
"""

from __future__ import annotations

import pathlib
import re

import jax
import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = {
    page.relative_to(DOCS).as_posix(): re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    for page in PAGES
}


@pytest.mark.parametrize("page", [name for name, blocks in BLOCKS.items() if blocks])
@pytest.mark.slow
def test_doc_page_blocks_run(page):
    pytest.importorskip("torch")
    namespace: dict = {}
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        for i, block in enumerate(BLOCKS[page]):
            exec(compile(block, f"docs/{page} block {i}", "exec"), namespace)


def test_docs_have_blocks():
    assert sum(len(b) for b in BLOCKS.values()) >= 10


@pytest.mark.parametrize("module", ["jln", "jln.linen", "jln.nnx", "jln.interop", "jln.testing"])
def test_api_reference_covers_public_names(module):
    """Every name in a public module's ``__all__`` is rendered by its API page: either the page
    renders the whole module, or it lists the name among the members it renders."""
    import importlib

    mod = importlib.import_module(module)
    page = DOCS / "api" / f"{module.split('.')[-1]}.md"
    text = page.read_text(encoding="utf-8")
    assert f"::: {module}\n" in text, f"{page} does not render {module}"
    listed = re.search(r"members:\n((?:\s+- \S+\n)+)", text)
    if listed:
        members = set(re.findall(r"- (\S+)", listed.group(1)))
        missing = sorted(set(mod.__all__) - members)
        assert not missing, f"{page} leaves out {missing}; add them to its members list"


def test_nav_lists_every_page():
    """mkdocs --strict only warns about pages outside the nav; this makes it an error here."""
    nav = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.relative_to(DOCS).as_posix() for p in PAGES}
    missing = sorted(p for p in pages if p not in nav)
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"
