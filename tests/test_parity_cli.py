"""``jln parity``: exit codes, filters, the JSON schema, and that planted mismatches fail."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("torch")

from jln import _index, _registry  # noqa: E402
from jln.cli import main as jln_main  # noqa: E402
from jln.cli import parity  # noqa: E402

SMALL = ["--shapes", "3x8,2x2x4:2,0x4", "--no-progress"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = parity.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_small_filtered_run_passes_with_json(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "parity.json"
    x64_before = jax.config.jax_enable_x64
    code, out, _ = run(capsys, "--ops", "layer_norm,rms_norm[llama]", "--dtypes", "float32,bf16,f64",
                       *SMALL, "--json", str(path))
    assert code == 0, out
    assert jax.config.jax_enable_x64 == x64_before  # x64 is scoped to the command
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("jln parity: ") and " passed, 0 failed, " in summary
    assert f"jax {jax.__version__}" in summary
    data = json.loads(path.read_text())
    assert set(data) >= {"results", "versions", "device", "summary"}
    assert {"jax", "torch", "jln"} <= set(data["versions"])
    rows = data["results"]
    keys = {"op", "dtype", "direction", "shape", "pass", "max_abs_err", "max_ulp", "frac_bitexact",
            "bound", "torch_err", "output"}
    assert all(keys <= set(r) for r in rows)
    assert {r["op"] for r in rows} == {"layer_norm", "rms_norm[llama]"}
    assert {r["dtype"] for r in rows} == {"float32", "bfloat16", "float64"}
    assert {r["direction"] for r in rows} == {"fwd", "bwd"}
    # layer_norm's backward covers dx and both parameter gradients
    assert {r["output"] for r in rows if r["op"] == "layer_norm" and r["direction"] == "bwd"} == {
        "d x", "d scale", "d bias"}
    assert [2, 2, 4] in [r["shape"] for r in rows] and [0, 4] in [r["shape"] for r in rows]
    assert all(r["pass"] for r in rows)
    assert data["summary"]["passed"] == len(rows) and data["summary"]["failed"] == 0
    # the named convention is held to the bf16 bit-exact rule, forward
    assert any(r["exact_rule"] for r in rows if r["op"] == "rms_norm[llama]" and r["dtype"] == "bfloat16")


@dataclasses.dataclass(frozen=True)
class _Planted(_registry.Op):
    """A registry op whose jln side is deliberately wrong."""

    jln_overrides: tuple[tuple[str, Any], ...] = ()
    add_ulp: bool = False

    def call_jln(self, inputs: dict[str, Any], k: int = 1, **overrides: Any) -> tuple[Any, ...]:
        out = super().call_jln(inputs, k, **{**overrides, **dict(self.jln_overrides)})
        if self.add_ulp:
            frozen = [jax.lax.stop_gradient(o) for o in out]
            up = [jnp.nextafter(o, jnp.asarray(jnp.inf, o.dtype)) - o for o in frozen]
            out = tuple(o + u for o, u in zip(out, up, strict=True))  # exactly one ulp up
        return out


@pytest.mark.parametrize(
    "planted, dtype",
    [
        (dataclasses.replace(_Planted(**vars(_index.BY_NAME["layer_norm"])), jln_overrides=(("eps", 1e-2),)), "float32"),
        (_Planted(**vars(_index.BY_NAME["rms_norm[llama]"]), add_ulp=True), "bfloat16"),
        (_Planted(**vars(_index.BY_NAME["rms_norm[llama]"]), jln_overrides=(("convention", "torch"),)), "bfloat16"),
    ],
    ids=["wrong-eps", "one-ulp", "convention-swapped"],
)
def test_planted_mismatch_exits_1(planted: _registry.Op, dtype: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_index, "OPS", (planted,))
    path = tmp_path / "p.json"
    code, out, _ = run(capsys, "--ops", planted.name, "--dtypes", dtype, "--shapes", "4x64",
                       "--no-progress", "--no-modules", "--json", str(path))
    assert code == 1
    assert "FAIL" in out and planted.name in out and " 0 failed" not in out
    fwd = [r for r in json.loads(path.read_text())["results"] if r["direction"] == "fwd"]
    assert fwd and not any(r["pass"] for r in fwd)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--bogus"], "unrecognized arguments"),
        (["--ops", "no_such_norm"], "rms_norm[gemma]"),  # lists the valid names
        (["--dtypes", "int8"], "float32"),
        (["--shapes", "4xq"], "bad shape"),
        (["--shapes", "4x8:3"], "k must be"),
        (["--impl", "fast"], "invalid choice"),
        (["--json", "/no/such/dir/r.json"], "does not exist"),  # said before the sweep runs
    ],
)
def test_usage_errors_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err


def test_torch_missing_exits_2_with_install_hint(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    code, _, err = run(capsys, "--ops", "layer_norm")
    assert code == 2
    assert "pip install 'jln[torch]'" in err


def test_list_and_dispatcher(capsys: pytest.CaptureFixture[str]) -> None:
    assert jln_main(["parity", "--list"]) == 0
    out = capsys.readouterr().out
    for op in _index.OPS:
        assert op.name in out
    assert "module:nn.LayerNorm[linen]" in out
    assert jln_main(["parity", "--help"]) == 0


def test_family_and_glob_filters() -> None:
    names = [op.name for op in _index.OPS]
    fams = {op.name: op.family for op in _index.OPS}
    assert parity._select(["rms_norm"], names, fams, "op") == [n for n in names if n.startswith("rms_norm[")]
    assert parity._select(["add_*"], names, fams, "op") == [n for n in names if n.startswith("add_")]
    assert parity._select(["rms_norm[t5]"], names, fams, "op") == ["rms_norm[t5]"]


def test_module_case_runs_or_skips_with_reason(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"
    code, out, _ = run(capsys, "--ops", "module:nn.LayerNorm[linen],module:nn.RMSNorm[nnx]", "--dtypes", "f32",
                       "--no-progress", "--json", str(path))
    data = json.loads(path.read_text())
    assert code == 0, out
    if data["results"]:
        assert {r["op"] for r in data["results"]} == {"module:nn.LayerNorm[linen]", "module:nn.RMSNorm[nnx]"}
        assert {r["direction"] for r in data["results"]} == {"fwd", "bwd"}
    else:  # jln.interop not in this build: skipped, with the reason
        assert all(s["reason"] for s in data["skipped"])


def test_progress_bar_draws_and_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    bar = parity.Progress(4, enabled=True, width=8)
    bar.advance()
    bar.advance()
    bar.step("layer_norm f32")
    bar.close()
    assert "[####....] 2/4 layer_norm f32" in buf.getvalue()
    quiet = parity.Progress(4, enabled=False)
    quiet.step("x")
    assert buf.getvalue().count("2/4") == 1


@pytest.mark.parametrize("impl", ["xla", "pallas"])
def test_impl_checks_one_path(impl: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # --impl runs every op case on that path (pallas: interpret mode here); float64 has no
    # kernel and is skipped with the reason, never silently run on another path
    path = tmp_path / "p.json"
    code, out, _ = run(capsys, "--ops", "layer_norm,add_rms_norm[llama],modulate", "--dtypes", "f32,f64",
                       "--impl", impl, "--shapes", "3x8,0x4", "--no-progress", "--json", str(path))
    assert code == 0, out
    assert f"layer_norm (impl={impl})" in out and f"add_rms_norm[llama] (impl={impl})" in out
    assert "modulate (impl=" not in out  # one path only: the default, untagged
    data = json.loads(path.read_text())
    assert data["summary"]["failed"] == 0 and data["summary"]["passed"] > 0
    if impl == "pallas":
        assert "impl='pallas' is not available here" in out and data["summary"]["skipped"] > 0


def test_a_module_that_fails_to_convert_fails(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # a converter that breaks (a torch upgrade renaming an attribute, say) is a failure, not a skip
    interop = pytest.importorskip("jln.interop")

    def broken(module: Any, api: str = "linen") -> Any:
        raise AttributeError("'LayerNorm' object has no attribute 'normalized_shape'")

    monkeypatch.setattr(interop, "from_torch", broken)
    code, out, _ = run(capsys, "--ops", "module:nn.LayerNorm[linen]", "--dtypes", "f32", "--no-progress")
    assert code == 1
    assert "FAIL" in out and "AttributeError" in out and "0 passed, 1 failed, 0 skipped" in out


def test_table_has_a_legend_and_whole_skip_reasons(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    code, out, _ = run(capsys, "--ops", "layer_norm", "--dtypes", "f64", "--impl", "native", "--shapes", "3x8",
                       "--no-progress", "--no-modules", "--json", str(path))
    assert code == 0
    assert parity.LEGEND in out
    legend = dict(line.split(None, 1) for line in parity.LEGEND.splitlines() if not line.startswith(" "))
    assert "float64" in legend["max_abs_err"] and "rule holds" in legend["decides"] and "vs torch" in legend["frac_bitexact"]
    (skip,) = json.loads(path.read_text())["skipped"]
    assert len(skip["reason"]) > 60
    (row,) = [line for line in out.splitlines() if " skip " in line]
    assert row.endswith(skip["reason"]), row


@dataclasses.dataclass(frozen=True)
class _NaN(_registry.Op):
    """A registry op whose jln forward has NaN where torch has a number."""

    def call_jln(self, inputs: dict[str, Any], k: int = 1, **overrides: Any) -> tuple[Any, ...]:
        out = super().call_jln(inputs, k, **overrides)
        return tuple(o.at[..., 0].set(jnp.nan) for o in out)


def test_nan_against_a_number_shows_no_ulp_count(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_index, "OPS", (_NaN(**vars(_index.BY_NAME["layer_norm"])),))
    path = tmp_path / "p.json"
    code, out, _ = run(capsys, "--ops", "layer_norm", "--dtypes", "f32", "--shapes", "4x8", "--no-progress",
                       "--no-modules", "--json", str(path))
    assert code == 1
    fwd = [line for line in out.splitlines() if line.startswith("layer_norm") and " fwd " in line]
    assert fwd and all(" FAIL " in line and " nan " in line for line in fwd), fwd
    assert str(2**63 - 1) not in out
    rows = [r for r in json.loads(path.read_text())["results"] if r["direction"] == "fwd"]
    assert rows and all(r["max_ulp"] == "nan" for r in rows)


@pytest.mark.parametrize("flag", ["--ops", "--dtypes"])
def test_empty_selection_is_a_usage_error(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, flag, "", "--no-progress")
    assert code == 2
    assert "selects nothing" in err and flag in err


def test_unknown_op_gets_a_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--ops", "rms_norm_llama", "--no-progress")
    assert code == 2 and "Did you mean 'rms_norm[llama]'" in err, err


def test_max_ulp_is_at_the_row_scale_and_the_elementwise_figure_is_kept(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    code, out, _ = run(capsys, "--ops", "layer_norm", "--dtypes", "f32", "--shapes", "3x3000", "--no-progress",
                       "--no-modules", "--json", str(path))
    assert code == 0, out
    rows = json.loads(path.read_text())["results"]
    # float32 layer_norm over 3000 features: at the row's scale a few ulps; elementwise, the
    # elements near zero count far more of their own (tiny) ulps
    assert rows and all(isinstance(r["max_ulp"], float) and r["max_ulp"] < 64 for r in rows), rows
    assert all(r["max_ulp_elementwise"] >= r["max_ulp"] // 2 for r in rows)
    assert "max_ulp_elementwise" in parity.LEGEND and "row's largest |torch|" in parity.LEGEND


def test_a_passing_row_shows_the_measure_that_decides(capsys: pytest.CaptureFixture[str]) -> None:
    # width-1 rows: the output is 0 to the reference, and jln's few ulps of rounding noise there
    # counted 8388608 "max_ulp" against a row whose largest |torch| is 0: a pass that read as a
    # failure. The table shows what the rule held instead: the share of the bound, or the
    # bit-exact rule's elementwise ulps
    code, out, _ = run(capsys, "--ops", "layer_norm,rms_norm[llama]", "--dtypes", "f32,bf16", "--shapes", "5x1,4x8",
                       "--no-progress", "--no-modules")
    assert code == 0, out
    rows = [line.split() for line in out.splitlines() if line.startswith(("layer_norm ", "rms_norm"))]
    assert rows
    for r in rows:
        i = r.index("pass")
        shown = r[i + 3: i + 6]  # after max_abs_err and bound: "0.12 of bound" or "1 ulp"
        if shown[1] == "of":
            assert float(shown[0]) <= 1.0, r
        else:
            assert shown[1] == "ulp" and int(shown[0]) <= 2, r
    assert "8388608" not in out


def test_row_ulp_of_a_subnormal_row_is_inf_without_a_warning() -> None:
    # a row whose largest |reference| is subnormal has ulps near 5e-324: an error of 1 there is
    # an infinite number of them, reported as inf, not as a numpy overflow warning
    import warnings

    from jln import _compare

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _compare.row_ulp(np.array([[1.0, 0.0]]), np.array([[0.0, 1e-320]])) == float("inf")
        assert _compare.row_ulp(np.array([[1.0, 2.0]]), np.array([[1.0, 2.0]])) == 0.0


def test_exact_rule_measures_a_cancelled_element_at_its_row_scale() -> None:
    # float16 rows of 4.0 with one element a bias brought near zero: that element 8 of its own
    # ulps off (a one-ulp split of the product it cancels, as DeBERTa's w*h + b gives) is an
    # eighth of an ulp at the row's scale and passes; 3 ulps on the row's largest element fails
    from jln import _compare

    torch_out = np.full((2, 1024), 4.0, np.float16)
    torch_out[0, 5] = np.float16(0.0625)
    near_zero = torch_out.copy()
    near_zero[0, 5] = np.float16(0.0625) + np.float16(8 * 2.0**-14)
    r = _compare.compare(near_zero, torch_out, exact=True)
    assert r.max_ulp_elementwise == 8 and r.max_ulp == 0.125 and r.passed
    assert parity._decides(r) == "8 ulp, 0.125 of row"
    large = torch_out.copy()
    large[1, 0] = np.float16(4.0 + 3 * 2.0**-8)
    r = _compare.compare(large, torch_out, exact=True)
    assert r.max_ulp_elementwise == 3 and not r.passed
    assert parity._decides(r) == "3 ulp, 3 of row"
    # the general rule is unchanged by it
    assert not _compare.compare(near_zero, torch_out, atol=1e-6).passed
