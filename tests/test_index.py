"""The index is the only list of families: every folder under jln/families is in it, and each
family's record holds what its folder defines (run over every family)."""

from __future__ import annotations

import importlib
import pathlib

import pytest

import jln
from jln import _index
from jln import linen as jnn
from jln import nnx as jnnx

FOLDERS = sorted(p.name for p in (pathlib.Path(jln.__file__).parent / "families").iterdir()
                 if p.is_dir() and (p / "family.py").exists())


def test_every_family_folder_is_one_line_of_the_index() -> None:
    assert sorted(f.name for f in _index.FAMILIES) == FOLDERS


@pytest.mark.parametrize("family", _index.FAMILIES, ids=lambda f: f.name)
def test_the_record_holds_what_the_folder_defines(family) -> None:
    folder = f"jln.families.{family.name}"
    assert importlib.import_module(f"{folder}.family").FAMILY is family
    # every public function it names has ops, every op is its own function's
    assert {op.family for op in family.ops} == {fn.name for fn in family.functions}
    for fn in family.functions:
        assert getattr(jln, fn.name).__module__ == f"{folder}.function", fn.name
    # each module kind has its linen and NNX class, written in the folder
    for kind in family.kinds:
        for ns, api in ((jnn, "linen"), (jnnx, "nnx")):
            assert getattr(ns, kind.name).__module__ == f"{folder}.{api}", (kind.name, api)
    # the converters point at the family's own layouts, and every layout is of its classes
    layouts = list(family.layouts.values())
    assert all(any(c.layout is lay for lay in layouts) for c in family.converters)
    assert set(family.layouts) <= {k.name for k in family.kinds} | {"Dense"}
