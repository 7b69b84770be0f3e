"""The linen and NNX faces are source written from the module kinds (``python -m jln._faces``):
a stale face fails here, and the written classes are what a reader, an IDE, a type checker
and the API reference see."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from jln import _faces, _index
from jln import linen as jnn
from jln import nnx as jnnx
from jln.families.adaptive.function import ORDERS, OrderName
from jln.families.gated_rms_norm import spec as gated_spec
from jln.families.layer_norm import spec as ln_spec
from jln.families.rms_norm import spec as rms_spec


def test_the_written_faces_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    rc = _faces.main(["--check"])
    out = capsys.readouterr()
    assert rc == 0, out.out[:4000] + out.err


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_every_kind_is_a_class_with_its_source(api: str) -> None:
    ns = jnn if api == "linen" else jnnx
    names = [k.name for k in _index.KINDS]
    assert sorted(ns.__all__) == sorted(names)
    for kind in _index.KINDS:
        cls = getattr(ns, kind.name)
        assert cls._kind is kind
        src = inspect.getsource(cls)
        assert f"class {kind.name}(" in src and "def __call__(" in src, kind.name
        assert cls.__doc__ and cls.__doc__.startswith(kind.doc.split("\n")[0][:40]), kind.name
        hints = typing.get_type_hints(cls)  # every annotation resolves
        for f in kind.options:
            assert f.name in hints, (kind.name, f.name)
        call = typing.get_type_hints(cls.__call__)
        assert list(call)[: len(kind.inputs)] == list(kind.inputs), kind.name


@pytest.mark.parametrize("kind", _index.KINDS, ids=lambda k: k.name)
def test_linen_fields_and_nnx_keywords_are_the_kinds_options(kind) -> None:
    lf = {f.name: f.default for f in dataclasses.fields(getattr(jnn, kind.name)) if f.name not in ("parent", "name")}
    want = {f.name: f.default for f in kind.options}
    assert lf == want
    sig = inspect.signature(getattr(jnnx, kind.name).__init__)
    params = list(sig.parameters.values())[1:]
    assert [p.name for p in params] == [s.name for s in kind.shapes] + [f.name for f in kind.options] + ["rngs"]
    for p in params[len(kind.shapes):-1]:
        assert p.default == want[p.name] or (p.default is inspect.Parameter.empty and want[p.name] is dataclasses.MISSING)


@pytest.mark.parametrize(
    "literal, names",
    [(ln_spec.LayerNormConvention, ln_spec.ALIASES), (rms_spec.RMSConvention, rms_spec.ALIASES),
     (gated_spec.GatedConvention, gated_spec.ALIASES), (OrderName, ORDERS)],
    ids=["layer_norm", "rms_norm", "gated_rms_norm", "orders"],
)
def test_the_functions_literal_types_are_the_names_they_take(literal, names) -> None:
    assert set(typing.get_args(literal)) == set(names)


def test_options_are_checked_at_construction() -> None:
    with pytest.raises(TypeError, match="`use_bias` must be True or False; received 'yes'"):
        jnn.LayerNorm(use_bias="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown convention 'lama'"):
        jnn.RMSNorm(convention="lama")  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_a_mistyped_keyword_names_the_class_and_the_closest_option(api: str) -> None:
    ns, sizes = (jnn, ()) if api == "linen" else (jnnx, (64,))
    with pytest.raises(TypeError, match=rf"jln\.{api}\.RMSNorm got an unexpected keyword argument 'epss'; did you mean eps="):
        ns.RMSNorm(*sizes, epss=1e-6)
    with pytest.raises(TypeError, match=rf"jln\.{api}\.RMSNorm got flax's argument 'epsilon': jln calls it eps="):
        ns.RMSNorm(*sizes, epsilon=1e-6)


def test_nnx_parameters_are_attributes_none_where_absent() -> None:
    m = jnnx.LayerNorm(4, use_bias=False)
    assert m.scale is not None and m.scale[...].shape == (4,)
    assert m.bias is None
    z = jnnx.AdaLNZero(3, 4)
    assert z.linear.kernel[...].shape == (3, 24) and z.norm is None


def test_submodules_load_on_first_use() -> None:
    import subprocess
    import sys

    code = "import jln; print(jln.linen.RMSNorm.__name__, jln.nnx.LayerNorm.__name__, jln.interop.from_torch.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["RMSNorm", "LayerNorm", "from_torch"]
