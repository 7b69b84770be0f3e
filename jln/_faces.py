"""Write the linen and NNX faces of every module kind as source: ``python -m jln._faces``.

A module kind (:class:`jln._modules.Kind`, in its family's ``module.py``) declares each option
once: name, annotation, default, doc line. This script writes, for each family, a ``linen.py``
and an ``nnx.py`` holding one ordinary class per kind (typed fields or ``__init__`` keywords
with their defaults, typed parameter attributes, a typed ``__call__``, the docstring on the
class), and the re-exports ``jln/linen.py`` and ``jln/nnx.py``. So readers, IDEs, type
checkers and the API reference see plain classes, while linen and NNX cannot drift: both are
written from the one record. ``python -m jln._faces --check`` exits 1 when a written file is
stale (``tests/test_faces.py`` runs it).

The parameters an NNX class declares are found by building the kind's parameter specs under
the options' values, every pair of them (every bool both ways, every choice of a ``Literal``,
``None`` and a size for an optional int): a name present in every valid configuration is typed
``nnx.Param[jax.Array]``, one present in some ``nnx.Param[jax.Array] | None`` (``None`` where
the options create none).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from jln import _index
from jln import _modules as M

ROOT = Path(__file__).resolve().parent

#: where each name an annotation may use is imported from
TYPE_IMPORTS = {
    "Any": "typing",
    "Literal": "typing",
    "Hashable": "collections.abc",
    "Sequence": "collections.abc",
    "Mapping": "collections.abc",
    "DTypeLike": "jax.typing",
    "Impl": "jln._platform",
    "Axis": "jln._validate",
    "Initializer": "jln._modules",
    "TorchNames": "jln._modules",
    "ChunkOrder": "jln.families.adaptive.function",
}
#: the size a probe gives every required size (it divides the kinds' default group counts)
SIZE = 32

_INIT_DOC = '        """Build the module: the arguments are the Args of the class docstring."""\n'

HEADER = (
    "# Written by `python -m jln._faces` from the module kinds of {source}: edit those and run it\n"
    "# again (tests/test_faces.py fails when this file is stale).\n"
)


# --------------------------------------------------------------------------- what a kind declares


def _kind_home(kind: M.Kind) -> tuple[str, str]:
    """``(module, name)`` of the variable that holds ``kind``."""
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "")
        if not name.startswith("jln.families."):
            continue
        for var, value in vars(mod).items():
            if value is kind and var.isupper():
                return name, var
    raise LookupError(f"no module variable holds the kind {kind.name}")


def _choices(annotation: str) -> list[Any]:
    """The values of a ``Literal[...]`` annotation (plus ``None`` if it is optional)."""
    m = re.match(r"Literal\[(.*)\]( \| None)?$", annotation)
    if m is None:
        return [None] if annotation.endswith("| None") else []
    values = list(ast.literal_eval("(" + m.group(1) + ",)"))
    return values + ([None] if m.group(2) else [])


def _candidates(f: dataclasses.Field[Any]) -> list[Any]:
    if f.type == "bool":
        return [True, False]
    if f.type == "int | None":
        return [None, SIZE]
    return _choices(str(f.type))


def _base_options(kind: M.Kind) -> dict[str, Any]:
    """Valid options for a probe: the defaults, and :data:`SIZE` for each required size."""
    return {f.name: SIZE for f in kind.options if f.default is dataclasses.MISSING}


def _tree(kind: M.Kind, options: dict[str, Any]) -> dict[str, str] | None:
    """Top-level name -> ``"param"``/``"group"``/``"state"`` of the tree the options create
    (``None`` when the options are invalid)."""
    try:
        cfg = kind.config(**options)
        shapes = [s.take(SIZE, "jln._faces") for s in kind.shapes]
        specs = kind.specs(cfg, *shapes)
        state = kind.state(cfg, *shapes) if kind.state is not None else {}
    except (TypeError, ValueError):
        return None
    out = {n: "param" if isinstance(s, M.ParamSpec) else "group" for n, s in specs.items()}
    return {**out, **{n: "state" for n in state}}


def declared(kind: M.Kind) -> dict[str, tuple[str, bool]]:
    """Every parameter (and running statistic) the kind may create: name -> (what, always)."""
    base = _base_options(kind)
    varied = [(f.name, _candidates(f)) for f in kind.options if _candidates(f)]
    configs = [base] + [{**base, a: v} for a, vs in varied for v in vs]
    configs += [{**base, a: v, b: w} for i, (a, vs) in enumerate(varied) for b, ws in varied[i + 1:]
                for v in vs for w in ws]  # every pair: a bias that needs one convention
    trees = [t for t in (_tree(kind, c) for c in configs) if t is not None]
    if not trees:
        raise ValueError(f"no valid options found to probe {kind.name}'s parameters")
    names: dict[str, tuple[str, bool]] = {}
    for t in trees:
        for n, what in t.items():
            names.setdefault(n, (what, all(n in other for other in trees)))
    return names


# --------------------------------------------------------------------------- writing source


def _default(value: Any) -> str:
    if value is jnp.float32:
        return "jnp.float32"
    text = json.dumps(value) if isinstance(value, str) else repr(value)
    if ast.literal_eval(text) != value:
        raise ValueError(f"cannot write the default {value!r} as source")
    return text


def _docstring(text: str, indent: str = "    ") -> str:
    lines = text.strip("\n").split("\n")
    quote = 'r"""' if "\\" in text else '"""'
    body = "\n".join((indent + line) if line.strip() else "" for line in lines[1:])
    return f"{indent}{quote}{lines[0]}\n{body}\n{indent}\"\"\"\n"


def _call_params(kind: M.Kind) -> tuple[list[str], str]:
    """The ``__call__`` parameters (after ``self``) and the call dict's source."""
    params = [f"{n}: jax.Array" for n in kind.inputs]
    params += [f"{n}: {a} = {_default(d)}" for n, d, a in kind.call_options]
    call = "{" + ", ".join(f'"{n}": {n}' for n, _, _ in kind.call_options) + "}"
    return params, call


def _call_doc(kind: M.Kind) -> str:
    """``__call__``'s docstring: what the kind's ``returns`` says it returns."""
    m = re.match(r"\(``__call__\(.*?\)``(.*?)\): (.*)$", kind.returns, re.S)
    note, returns = (m.group(1).lstrip(", "), m.group(2)) if m else ("", kind.returns)
    head = f"The module on its inputs{' (' + note + ')' if note else ''}."
    body = textwrap.fill(returns, 96, initial_indent="  ", subsequent_indent="  ")
    return _docstring(f"{head}\n\nReturns:\n{body}", "        ")


def _inputs(kind: M.Kind) -> str:
    return "(" + ", ".join(kind.inputs) + ("," if len(kind.inputs) == 1 else "") + ")"


def _signature(name: str, params: list[str], returns: str, indent: str = "    ") -> str:
    one = f"{indent}def {name}(self, {', '.join(params)}) -> {returns}:"
    if len(one) <= 110:
        return one + "\n"
    inner = indent + "    "
    return f"{indent}def {name}(\n{inner}self,\n" + "".join(f"{inner}{p},\n" for p in params) + f"{indent}) -> {returns}:\n"


def linen_class(kind: M.Kind, kinds_module: str) -> str:
    fields = []
    for f in kind.options:
        default = "" if f.default is dataclasses.MISSING else f" = {_default(f.default)}"
        fields.append(f"    {f.name}: {f.type}{default}\n")
    params, call = _call_params(kind)
    if kind.dropout:
        params += ["*", "deterministic: bool = True"]
    forward = f"_linen.forward(self, {_inputs(kind)}, {call}" + (", deterministic)" if kind.dropout else ")")
    return (
        f"class {kind.name}(_linen.Module):\n" + _docstring(kind.docstring("linen")) + "\n"
        f"    _kind: ClassVar[Kind] = {kinds_module}\n\n" + "".join(fields) + "\n"
        "    @nn.compact\n" + _signature("__call__", params, kind.output) + _call_doc(kind) + f"        return {forward}\n"
    )


def nnx_class(kind: M.Kind, kinds_module: str) -> str:
    attrs = [f"    {s.name}: {s.held}\n" for s in kind.shapes]
    for name, (what, always) in declared(kind).items():
        typ = {"param": "nnx.Param[jax.Array]", "group": "_nnx.Params", "state": "nnx.BatchStat[jax.Array]"}[what]
        attrs.append(f"    {name}: {typ}\n" if always else f"    {name}: {typ} | None = None\n")
    if kind.state is not None:
        attrs.append("    use_running_average: bool\n")
    if kind.dropout:
        attrs.append("    dropout_layer: nnx.Dropout\n")
    attrs += [f"    {f.name}: {f.type}\n" for f in kind.options]
    init = [f"{s.name}: {s.type}" for s in kind.shapes]
    opts = list(kind.options)
    init += [f"{f.name}: {f.type}" + ("" if f.default is dataclasses.MISSING else f" = {_default(f.default)}")
             for f in opts[: kind.positional]]
    init.append("*")
    init += [f"{f.name}: {f.type}" + ("" if f.default is dataclasses.MISSING else f" = {_default(f.default)}")
             for f in opts[kind.positional:]]
    init.append("rngs: nnx.Rngs | None = None")
    sizes = "(" + ", ".join(s.name for s in kind.shapes) + ("," if len(kind.shapes) == 1 else "") + ")"
    options = "dict(" + ", ".join(f"{f.name}={f.name}" for f in opts) + ")"
    build = f"        _nnx.build(self, {sizes}, {options}, rngs)\n"
    if len(build) > 110:
        items = "".join(f"                {f.name}={f.name},\n" for f in opts)
        build = f"        _nnx.build(\n            self,\n            {sizes},\n            dict(\n{items}            ),\n            rngs,\n        )\n"
    params, call = _call_params(kind)
    return (
        f"class {kind.name}(_nnx.Module):\n" + _docstring(kind.docstring("nnx")) + "\n"
        f"    _kind: ClassVar[Kind] = {kinds_module}\n\n" + "".join(attrs) + "\n"
        + _signature("__init__", init, "None") + _INIT_DOC + build + "\n"
        + _signature("__call__", params, kind.output) + _call_doc(kind)
        + f"        return _nnx.forward(self, {_inputs(kind)}, {call})\n"
    )


def _imports(api: str, body: str, kind_modules: list[str]) -> str:
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", " ".join(re.findall(r":\s*([^=\n]+)", body))))
    names |= set(re.findall(r"-> ([^:]+):", body))
    by_module: dict[str, set[str]] = {"typing": {"ClassVar"}, "jln._modules": {"Kind"}}
    for n in names:
        if n in TYPE_IMPORTS:
            by_module.setdefault(TYPE_IMPORTS[n], set()).add(n)
    std = sorted(m for m in by_module if m in ("typing", "collections.abc"))
    lines = [f"from {m} import {', '.join(sorted(by_module[m]))}" for m in std]
    third = ["import flax.linen as nn" if api == "linen" else None, "import jax", "import jax.numpy as jnp" if "jnp." in body else None]
    if api == "nnx":
        third.append("from flax import nnx")
    if "jax.typing" in by_module:
        third.append(f"from jax.typing import {', '.join(sorted(by_module['jax.typing']))}")
    ours = [("jln", f"from jln import _{api}")]
    ours += [(m, f"from {m} import {', '.join(sorted(by_module[m]))}") for m in by_module if m.startswith("jln.")]
    for mod in sorted(set(kind_modules)):
        pkg, _, leaf = mod.rpartition(".")
        ours.append((pkg, f"from {pkg} import {leaf}" + (" as kinds" if leaf == "module" else "")))
    first = [line for _, line in sorted(ours)]  # isort's order: by module, then names
    return "\n".join(lines) + "\n\n" + "\n".join(t for t in third if t) + "\n\n" + "\n".join(first) + "\n"


def family_face(family: Any, api: str) -> str:
    homes = [_kind_home(k) for k in family.kinds]
    write = linen_class if api == "linen" else nnx_class
    def alias(mod: str) -> str:
        leaf = mod.rpartition(".")[2]
        return "kinds" if leaf == "module" else leaf

    body = "\n\n".join(write(k, f"{alias(mod)}.{var}") for k, (mod, var) in zip(family.kinds, homes, strict=True))
    names = ", ".join(f":class:`{k.name}`" for k in family.kinds)
    sources = ", ".join(sorted({f"jln/families/{family.name}/{m.rpartition('.')[2]}.py" for m, _ in homes}))
    face = "linen" if api == "linen" else "NNX"
    doc = f'"""The {face} face of the {family.name} family: {names}."""\n\n'
    return (HEADER.format(source=sources) + doc + "from __future__ import annotations\n\n"
            + _imports(api, body, [m for m, _ in homes]) + "\n\n" + body)


_FACE_DOCS = {
    "linen": '''"""Flax linen modules over jln's core functions (the same classes, options and numbers as
:mod:`jln.nnx`).

Every class is written from its family's module kind (options, parameters, the pure function
it calls), as its :mod:`jln.nnx` twin is. Defaults follow torch (eps 1e-5, output in the input
dtype). ``dtype=None`` keeps the core functions' dtype rule; ``dtype=d`` computes in and
returns ``d``. ``monitor=True`` sows per-row input/output statistics (see
``jln._monitor.row_stats``) into the ``"intermediates"`` collection under ``"stats"``. A
flax argument name (``epsilon``...) gets a ``TypeError`` naming jln's.
"""
''',
    "nnx": '''"""Flax NNX modules over jln's core functions (the same classes, options and numbers as
:mod:`jln.linen`).

Every class is written from its family's module kind, as its :mod:`jln.linen` twin is. Size
arguments are positional, options keyword-only (but torch's positional ones in
``TransformerEncoderLayer``); each option reads as an attribute (``module.eps``) and all of
them as ``module.cfg``, as on a linen module. ``monitor=True`` sows per-row statistics as
``nnx.Intermediate`` named ``"stats"`` (read them with ``nnx.capture(model, nnx.Intermediate)``).
"""
''',
}


def reexports(api: str) -> str:
    lines, names = [], []
    for fam in _index.FAMILIES:
        for kind in fam.kinds:
            lines.append(f"from jln.families.{fam.name}.{api} import {kind.name} as {kind.name}")
            names.append(kind.name)
    return (HEADER.format(source="jln._index") + _FACE_DOCS[api] + "\n" + "\n".join(sorted(lines, key=str.lower)) + "\n\n__all__ = [\n"
            + "".join(f'    "{n}",\n' for n in names) + "]\n")


def files() -> dict[Path, str]:
    """Every face file and its source."""
    out: dict[Path, str] = {}
    for fam in _index.FAMILIES:
        for api in ("linen", "nnx"):
            out[ROOT / "families" / fam.name / f"{api}.py"] = family_face(fam, api)
    for api in ("linen", "nnx"):
        out[ROOT / f"{api}.py"] = reexports(api)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jln._faces", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 (showing the diff) when a written file is stale")
    args = p.parse_args(argv)
    stale = 0
    for path, text in files().items():
        old = path.read_text() if path.exists() else ""
        if old == text:
            continue
        stale += 1
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(path), "regenerated"))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT.parent)}")
    if args.check and stale:
        print(f"{stale} face file(s) are stale: run `python -m jln._faces`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
