"""Tests of ``jln bench`` and its machinery (no timing assertions: timings vary by machine)."""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jln import _index
from jln.cli import bench as cli
from jln.cli import main as jln_main
from jln.cli._bench import harness as _bench
from jln.cli._bench import impls as _bench_impls
from tests.conftest import NATIVE_OFF

TINY = ["--widths", "256", "--rows", "64", "--reps", "2", "--warmup", "1", "--quiet"]
RECORD_KEYS = {"impl", "op", "shape", "dtype", "direction", "median_us", "gbps", "pct_of_copy",
               "compile_s", "residual_bytes_per_elem", "bytes", "faults_per_call"}


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    path = out / "r.json"
    argv = ["--quick", *TINY, "--ops", "layer_norm,add_rms_norm[torch]", "--impls", "jln,jln-xla,jln-native,jln-pallas,flax,jnp,torch",
            "--json", str(path), "--plot", str(out / "r.png"), "--md", str(out / "r.md")]
    assert cli.main(argv) == 0
    report = json.loads(path.read_text())
    report["_dir"] = str(out)
    return report


@pytest.mark.slow
def test_recorded_command_names_no_machine_path(tiny_report: dict) -> None:
    # the outputs went to absolute temporary paths: the report records their file names only
    command = tiny_report["command"]
    assert tiny_report["_dir"] not in command, command
    assert "--json r.json --plot r.png --md r.md" in command, command
    md = (pathlib.Path(tiny_report["_dir"]) / "r.md").read_text()
    assert f"Command: `{command}`" in md
    assert cli.recorded_command(["--json=/data/x/a.json", "--md", "bench/results/a.md", "--title", "a /b"]) == (
        "jln bench --json=a.json --md bench/results/a.md --title 'a /b'")


def test_json_schema(tiny_report: dict) -> None:
    assert {"device", "versions", "results", "skipped"} <= set(tiny_report)
    assert tiny_report["device"]["platform"] == jax.default_backend()
    assert tiny_report["versions"]["jax"] == jax.__version__
    results = tiny_report["results"]
    for s in tiny_report["skipped"]:
        assert s["reason"]
        # everything else runs here, also under strict JAX (jln-native unless JLN_NATIVE=0)
        assert s["impl"] in ("jln-pallas", *(("jln-native",) if NATIVE_OFF else ())), s
    # 2 dtypes x (copy + 2 ops x 6 runnable impls x 2 directions), jln-pallas is skipped on CPU
    seen = {(r["impl"], r["op"], r["dtype"], r["direction"]) for r in results}
    for dtype in ("float32", "bfloat16"):
        assert ("copy", "copy", dtype, "fwd") in seen
        for op in ("layer_norm", "add_rms_norm[torch]"):
            for impl in ("jln", "jln-xla", *(() if NATIVE_OFF else ("jln-native",)), "flax", "jnp"):
                for direction in ("fwd", "fwd+bwd"):
                    assert (impl, op, dtype, direction) in seen
    for r in results:
        assert RECORD_KEYS <= set(r), r
        assert r["shape"] == [64, 256]
        assert r["median_us"] > 0 and r["gbps"] > 0 and r["pct_of_copy"] > 0
        itemsize = jnp.dtype(r["dtype"]).itemsize
        op = "layer_norm" if r["op"] == "copy" else r["op"]  # the copy moves 2·M·N·b, as a forward
        assert r["bytes"] == _bench.bytes_moved(op, 64, 256, itemsize, r["direction"])
        assert math.isclose(r["gbps"], r["bytes"] / r["median_us"] / 1e3, rel_tol=1e-9)
        assert r["faults_per_call"] is None or r["faults_per_call"] >= 0
        if r["impl"] != "copy":
            assert r["residual_bytes_per_elem"] > 0
            assert r["impl"].startswith("torch") or r["compile_s"] > 0
    if jax.default_backend() == "cpu":
        assert any(s["impl"] == "jln-pallas" and "natively" in s["reason"] for s in tiny_report["skipped"])
        # the native library was made ready before the cases (its build is no case's compile time)
        from jln.kernels import _cpu

        native = tiny_report["native_kernels"]
        assert native["ready"] == (_cpu.available() is None) and native["reason"] == _cpu.available(), native
        assert native["load_s"] >= 0
    else:
        assert tiny_report["native_kernels"] is None


def test_copy_floor_is_the_faster_copy(tiny_report: dict) -> None:
    # torch is among the impls, so the floor times torch's copy_ beside XLA's -x, on a CPU too
    copies = [r for r in tiny_report["results"] if r["impl"] == "copy"]
    assert copies
    for r in copies:
        assert {"xla_gbps", "torch_gbps"} <= set(r), r
        assert r["via"] in ("xla", "torch")
        # the first, side-by-side timing picks the copy to re-time (via); the record keeps the
        # best timing of the run, at least that first one's
        assert r[f"{r['via']}_gbps"] == pytest.approx(max(r["xla_gbps"], r["torch_gbps"]), rel=1e-12)
        assert r["gbps"] >= r[f"{r['via']}_gbps"] * (1 - 1e-12)
        assert r["first_us"] == pytest.approx(r["bytes"] / r[f"{r['via']}_gbps"] / 1e3, rel=1e-12)


def test_float16_runs_on_request(tmp_path: pathlib.Path) -> None:
    # float16 (fp16 checkpoints) is a --dtypes choice beside the default float32 and bfloat16
    assert cli.main(["--dtypes", "float16", "--widths", "256", "--rows", "32", "--reps", "2", "--warmup", "1",
                     "--ops", "layer_norm", "--impls", "jln,jln-xla,flax", "--directions", "fwd", "--quiet",
                     "--json", str(tmp_path / "r.json")]) == 0
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert {r["dtype"] for r in results} == {"float16"}
    assert {r["impl"] for r in results} == {"copy", "jln", "jln-xla", "flax"}
    assert all(r["bytes"] == 2 * 32 * 256 * 2 for r in results)  # read x, write y, 2 bytes each
    assert cli.main(["--dtypes", "float64", "--quiet"]) == 2  # not a bench dtype: a usage error


def test_buffer_sets_span_four_caches_per_array() -> None:
    mib = 1 << 20
    # each input array alone spans 4x the cache: a 4 MiB x against a 32 MiB cache takes 32 sets
    assert _bench.buffer_sets(4 * mib, 64, cache_bytes=32 * mib) == 32
    assert _bench.buffer_sets(2 * mib, 64, cache_bytes=32 * mib) == 64
    assert _bench.buffer_sets(3 * mib, 64, cache_bytes=32 * mib) == 43  # rounded up
    assert _bench.buffer_sets(1 * mib, 64, cache_bytes=32 * mib) == 64  # capped
    assert _bench.buffer_sets(1 * mib, 8, cache_bytes=32 * mib) == 8
    assert _bench.buffer_sets(256 * mib, 64, cache_bytes=32 * mib) == 2  # at least two
    for array in (mib, 3 * mib, 5 * mib, 40 * mib):
        n = _bench.buffer_sets(array, 10_000, cache_bytes=32 * mib)
        assert n * array >= 4 * 32 * mib and (n == 2 or (n - 1) * array < 4 * 32 * mib)


def test_report_files(tiny_report: dict) -> None:
    import pathlib

    d = pathlib.Path(tiny_report["_dir"])
    assert (d / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (d / "r.md").read_text()
    assert "| layer_norm | bfloat16 | fwd |" in md
    assert "vs jln-xla" in md
    assert tiny_report["device"]["name"] in md


def test_byte_counts_match_array_sizes() -> None:
    # Independent of the formula: count the bytes of the arrays each direction must touch.
    m, n = 12, 40
    for dtype in (jnp.float32, jnp.bfloat16):
        x = jnp.zeros((m, n), dtype)
        b = x.nbytes
        assert _bench.bytes_moved("layer_norm", m, n, x.itemsize, "fwd") == b + b  # read x, write y
        assert _bench.bytes_moved("rms_norm", m, n, x.itemsize, "fwd+bwd") == 3 * b  # x, dy, dx
        assert _bench.bytes_moved("add_layer_norm", m, n, x.itemsize, "fwd") == 4 * b  # x, r, y, s
        assert _bench.bytes_moved("add_rms_norm", m, n, x.itemsize, "fwd+bwd") == 6 * b
        assert _bench.bytes_moved("layer_norm", m, n, x.itemsize, "bwd") == 3 * b  # x, dy, dx
    with pytest.raises(ValueError, match="direction"):
        _bench.bytes_moved("layer_norm", m, n, 4, "backward")


def test_residual_measure_on_known_function() -> None:
    # d sin(x) = cos(x) dx: reverse mode keeps cos(x) (float32, 4 B/elem) and nothing else.
    x = jnp.ones((8, 64), jnp.float32)
    assert _bench.residual_bytes_per_elem(lambda p: jnp.sin(p["x"]), {"x": x}) == pytest.approx(4.0)
    # a linear function keeps nothing
    assert _bench.residual_bytes_per_elem(lambda p: 3.0 * p["x"], {"x": x}) == 0.0


@pytest.mark.parametrize(
    "impl, lo, hi",
    [("jln", 2.0, 2.1), ("jln-xla", 2.0, 2.1), ("jln-native", 2.0, 2.1), ("flax", 11.9, 12.2), ("jnp", 2.0, 12.2)],
)
def test_residual_bytes_bf16(impl: str, lo: float, hi: float) -> None:
    data = _bench.make_data(128, 512, jnp.bfloat16, 1)
    p, _ = _bench.op_inputs("layer_norm", data, 0)
    r = _bench.residual_bytes_per_elem(_bench_impls.jax_op(impl, "layer_norm"), p)
    assert lo <= r <= hi


def test_torch_residual_measure() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(16, 128, dtype=torch.bfloat16)
    w = torch.ones(128, dtype=torch.bfloat16)
    # torch's native layer_norm saves x (2 B) plus per-row mean/rstd (left out: fewer than N).
    r = _bench.torch_residual_bytes_per_elem(lambda p: (torch.nn.functional.layer_norm(p["x"], (128,), p["w"]),),
                                             {"x": x, "w": w})
    assert r == pytest.approx(2.0 + 2 * 128 / x.numel())
    # exp saves its float32 result: 4 B/elem
    r = _bench.torch_residual_bytes_per_elem(lambda p: (p["x"].exp(),), {"x": x.float()})
    assert r == pytest.approx(4.0)


def test_time_calls_rotates_buffers_and_syncs_once_per_sample() -> None:
    calls: list[int] = []
    syncs: list[int] = []
    tm = _bench.time_calls(lambda i: calls.append(i) or i, 3, lambda outs: syncs.append(1),
                           reps=5, warmup=2, min_sample_s=0.0)
    assert tm.samples == 5 and tm.inner == 1 and tm.median_s >= tm.min_s >= 0
    assert len(syncs) == 2 + 1 + 5  # warm-up calls, one estimate, then one per sample
    timed = calls[3:]
    assert timed == [(1 + k) % 3 for k in range(5)]  # consecutive samples use different buffers


def test_in_flight_bounds_the_outputs_a_sample_holds() -> None:
    # with in_flight=2 a sample of m calls blocks on each output once the third call is out,
    # oldest first, then on the last two together; with 0 (the CPU's) on each output as soon
    # as its call returns; with None it holds all m until its end
    for in_flight in (2, 0, None):
        live: list[int] = []
        peak = 0
        synced: list[list[int]] = []
        counter = iter(range(10**6))

        def call(i: int, live: list[int] = live, counter: Iterator[int] = counter) -> int:
            nonlocal peak
            k = next(counter)
            live.append(k)
            peak = max(peak, len(live))
            return k

        def sync(out: object, live: list[int] = live, synced: list[list[int]] = synced) -> None:
            outs = out if isinstance(out, list) else [out]
            synced.append(list(outs))
            for o in outs:
                live.remove(o)

        tm = _bench.time_interleaved({"a": (call, 3, sync)}, reps=1, warmup=1, min_sample_s=1.0,
                                     in_flight=in_flight)["a"]
        m = tm.inner
        assert m == 64  # a 1 s sample of instant calls: the cap
        timed = [[k - 2 for k in s] for s in synced[2:]]  # after the warm-up call and the estimate
        if in_flight == 2:
            assert timed == [[k] for k in range(m - 2)] + [[m - 2, m - 1]]
            assert peak == 3
        elif in_flight == 0:
            assert timed == [[k] for k in range(m)] + [[]]
            assert peak == 1
        else:
            assert timed == [list(range(m))]
            assert peak == m


@pytest.mark.skipif(_bench.minor_faults() is None, reason="this platform does not count page faults (getrusage)")
def test_time_interleaved_counts_page_faults() -> None:
    # a call writing into memory fresh from the OS faults a page in per 4 KiB it writes: 8 MiB
    # mapped and touched per call (an anonymous mapping, so no allocator keeps it between calls)
    # is about 2048 faults; a call that writes nothing, about none
    import mmap

    size = 8 << 20

    def fresh(i: int) -> int:
        with mmap.mmap(-1, size) as m:
            m.write(b"\1" * size)
        return i

    tms = _bench.time_interleaved({"fresh": (fresh, 2, lambda outs: None), "none": (lambda i: i, 2, lambda outs: None)},
                                  reps=5, warmup=1, min_sample_s=0.0)
    pages = size / _bench.PAGE_BYTES
    assert 0.9 * pages <= tms["fresh"].faults_per_call <= 1.5 * pages, tms["fresh"]
    assert tms["none"].faults_per_call < 64, tms["none"]  # the interpreter's own, at most


def test_faulted_cases_are_listed() -> None:
    # the markdown names the records whose calls faulted in at least FAULTED_SHARE of the pages
    # their case moves, and only those
    def rec(impl: str, faults: float | None) -> dict:
        return {"impl": impl, "op": "layer_norm", "shape": [1024, 256], "dtype": "float32", "direction": "fwd",
                "median_us": 100.0, "min_us": 90.0, "gbps": 21.0, "pct_of_copy": 50.0, "bytes": 2 << 20,
                "residual_bytes_per_elem": 4.0, "faults_per_call": faults}

    pages = (2 << 20) / _bench.PAGE_BYTES
    report = {"device": {"platform": "cpu", "name": "test", "cores": 1, "torch_device": None},
              "versions": {}, "skipped": [],
              "results": [rec("jln", 0.0), rec("flax", _bench.FAULTED_SHARE * pages), rec("jnp", None),
                          rec("torch", _bench.FAULTED_SHARE * pages - 1)]}
    assert [r["impl"] for r in _bench.faulted_cases(report)] == ["flax"]
    md = _bench.markdown(report)
    assert f"| flax | layer_norm | 1024×256 | float32 | fwd | {_bench.FAULTED_SHARE * pages:.0f} | 100 |" in md, md
    assert "| torch | layer_norm" not in md
    report["results"][1]["faults_per_call"] = 0.0
    assert "page faults" not in _bench.markdown(report)


def test_time_interleaved_takes_turns() -> None:
    # one sample of every implementation per round, each round in a shuffled order of its own
    # (seeded: the same every run), so over the rounds each implementation comes first and
    # follows each other one
    def run(reps: int) -> tuple[dict[str, tuple[int, int]], list[tuple[str, int]]]:
        log: list[tuple[str, int]] = []

        def timed(name: str) -> _bench.Timed:
            return (lambda i: log.append((name, i)) or i, 2, lambda outs: None)

        tms = _bench.time_interleaved({k: timed(k) for k in "abcd"}, reps=reps, warmup=1, min_sample_s=0.0)
        return {k: (t.samples, t.inner) for k, t in tms.items()}, log[8:]  # after a warm-up and an estimate each

    counts, timed_calls = run(40)
    assert counts == dict.fromkeys("abcd", (40, 1))
    rounds = [[name for name, _ in timed_calls[4 * r: 4 * r + 4]] for r in range(40)]
    assert all(sorted(r) == list("abcd") for r in rounds)
    assert {r[0] for r in rounds} == set("abcd")
    follows = {(r[i], r[i + 1]) for r in rounds for i in range(3)}
    assert follows == {(u, v) for u in "abcd" for v in "abcd" if u != v}
    assert len({tuple(r) for r in rounds}) > 4  # not one order rotated
    assert [i for name, i in timed_calls if name == "b"][:4] == [1, 0, 1, 0]  # buffers rotate per impl
    assert run(40)[1] == timed_calls  # seeded


def test_same_data_across_impls() -> None:
    # Every implementation computes the same layer norm on the same buffers (a float64 reference).
    data = _bench.make_data(32, 256, jnp.float32, 1)
    p, _ = _bench.op_inputs("layer_norm", data, 0)
    x = np.asarray(p["x"], np.float64)
    mu = x.mean(-1, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + _bench_impls.EPS)
    ref = ref * np.asarray(p["scale"], np.float64) + np.asarray(p["bias"], np.float64)
    for impl in ("jln", "jln-xla", *(() if NATIVE_OFF else ("jln-native",)), "flax", "flax-2pass", "jnp"):
        with _bench.standard_promotion():
            (y,) = _bench_impls.jax_op(impl, "layer_norm")(p)
        np.testing.assert_allclose(np.asarray(y), ref, atol=2e-5, err_msg=impl)
    torch = pytest.importorskip("torch")
    (yt,) = _bench_impls.torch_op("layer_norm")({k: torch.from_numpy(np.array(v)) for k, v in p.items()})
    np.testing.assert_allclose(yt.numpy(), ref, atol=2e-5)


@pytest.mark.parametrize("op", ["gated_rms_norm[mamba]", "gated_rms_norm[qwen3_next]", "batch_norm", "group_norm[1]"])
def test_flax_baselines_compute_torchs_numbers(op: str) -> None:
    # flax has no gated RMSNorm and other defaults for BatchNorm/GroupNorm: the baselines a
    # flax user writes must still do torch's arithmetic, or the timing compares other work.
    torch = pytest.importorskip("torch")
    data = _bench.make_data(32, 256, jnp.float32, 1)
    p, _ = _bench.op_inputs(op, data, 0)
    with _bench.standard_promotion():
        (y,) = _bench_impls.jax_op("flax", op)(p)
    (yt,) = _bench_impls.torch_op(op)({k: torch.from_numpy(np.array(v)) for k, v in p.items()})
    np.testing.assert_allclose(np.asarray(y), yt.numpy(), atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bogus"], "unrecognized arguments"),
        (["--ops", "layer_nrom"], "unknown op"),
        (["--impls", "flax,pytorch"], "unknown impl"),
        (["--dtypes", "float8"], "unknown dtype"),
        (["--widths", "0"], "positive integers"),
        (["--rows", "abc"], "one positive integer"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "usage: jln bench" in err


def test_dispatch_from_jln_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert jln_main(["bench", "--widths", "x"]) == 2
    assert jln_main(["bench", "--help"]) == 0
    assert "--quick" in capsys.readouterr().out


def test_rerender_from_json(tiny_report: dict, tmp_path: object) -> None:
    import pathlib

    d = pathlib.Path(tiny_report["_dir"])
    md = pathlib.Path(str(tmp_path)) / "again.md"
    assert cli.main(["--from-json", str(d / "r.json"), "--md", str(md)]) == 0
    assert md.read_text() == (d / "r.md").read_text()
    assert cli.main(["--from-json", str(d / "missing.json"), "--md", str(md)]) == 2


def test_backward_alone_direction(tmp_path: object) -> None:
    # "bwd" times the reverse pass from saved residuals, for JAX and torch alike, with the
    # backward's byte count
    path = tmp_path / "b.json"  # type: ignore[operator]
    argv = [*TINY, "--ops", "layer_norm,add_layer_norm", "--impls", "jln,jln-xla,flax,torch",
            "--dtypes", "float32", "--directions", "bwd", "--json", str(path), "--md", str(tmp_path / "b.md")]  # type: ignore[operator]
    assert cli.main(argv) == 0
    report = json.loads(path.read_text())
    assert report["skipped"] == []
    got = {(r["impl"], r["op"]) for r in report["results"] if r["direction"] == "bwd"}
    assert got == {(i, o) for i in ("jln", "jln-xla", "flax", "torch") for o in ("layer_norm", "add_layer_norm")}
    for r in report["results"]:
        if r["direction"] == "bwd":
            assert r["bytes"] == _bench.bytes_moved(r["op"], 64, 256, 4, "bwd") and r["median_us"] > 0
    assert "| bwd |" in (tmp_path / "b.md").read_text()  # type: ignore[operator]


def test_eager_suite_runs(tmp_path: pathlib.Path) -> None:
    # bench/eager.py on a tiny case: one row per op, the ratios those rows' own times give
    import importlib.util

    pytest.importorskip("torch")
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "eager.py"
    spec = importlib.util.spec_from_file_location("jln_bench_eager", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "eager.md"
    assert mod.main([str(out), "--widths", "128", "--dtypes", "bfloat16", "--elements", "4096", "--reps", "2"]) == 0
    rows = [line.split(" | ") for line in out.read_text().splitlines() if line.startswith("| ") and "×" in line]
    assert [r[0] for r in rows] == ["| layer_norm", "| add_layer_norm", "| rms_norm[torch]"]
    for r in rows:
        assert r[1] == "32×128" and r[2] == "bfloat16"
        eager, op_by_op, jit, torch_eager = (float(v) for v in r[4:8])
        assert min(eager, op_by_op, jit, torch_eager) > 0
        # (the cells are rounded to whole microseconds, the ratios taken before rounding)
        assert float(r[8]) == pytest.approx(op_by_op / eager, rel=1.5 / min(eager, op_by_op) + 0.01)
        assert float(r[9]) == pytest.approx(eager / jit, rel=1.5 / min(eager, jit) + 0.01)


def test_ratios_say_what_they_are_without_faulted_widths() -> None:
    # jln against flax at two widths; flax faulted pages in at the first: the geometric mean
    # over both, and in parentheses the ratio at the width where neither faulted
    def rec(impl: str, width: int, us: float, faults: float) -> dict:
        return {"impl": impl, "op": "layer_norm", "shape": [1 << 20 // width, width], "dtype": "float32",
                "direction": "fwd", "median_us": us, "min_us": us, "gbps": 1.0, "pct_of_copy": 50.0,
                "bytes": 8 << 20, "residual_bytes_per_elem": 4.0, "faults_per_call": faults}

    report = {"device": {"platform": "cpu", "name": "test", "cores": 1, "torch_device": None}, "versions": {},
              "skipped": [], "results": [rec("jln", 256, 100.0, 0.0), rec("flax", 256, 400.0, 2048.0),
                                         rec("jln", 1024, 100.0, 0.0), rec("flax", 1024, 125.0, 0.0)]}
    (row,) = _bench.ratios(report)
    assert row["flax"] == pytest.approx(math.sqrt(0.25 * 0.8))
    assert row["flax_unfaulted"] == pytest.approx(0.8)
    assert "| layer_norm | float32 | fwd | 0.45 (0.80) |" in _bench.markdown(report)
    report["results"][1]["faults_per_call"] = 0.0
    (row,) = _bench.ratios(report)
    assert "flax_unfaulted" not in row
    assert "| layer_norm | float32 | fwd | 0.45 |" in _bench.markdown(report)


@pytest.mark.slow
def test_gpu_export_check_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # bench/gpu_export.py (part of bench/gpu.sh's check) on this CPU: the native kernels under
    # jit, the XLA body exported; every line ok
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "gpu_export.py"
    spec = importlib.util.spec_from_file_location("jln_bench_gpu_export", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "gpu_export: 3 of 3 ok"
    assert all(line.startswith("ok   ") and "y == xla: True" in line for line in lines[:-1]), lines


@pytest.mark.parametrize("flag", ["--json", "--md", "--plot"])
def test_unwritable_output_is_refused_before_the_run(flag: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    # said at once (exit 2), not after minutes of timing
    assert cli.main(["--quick", flag, str(tmp_path / "missing" / "r.out")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["--quick", flag, str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_floor_times_torch_copy_whatever_the_impls(tmp_path: pathlib.Path) -> None:
    # the floor is the faster of XLA's copy and torch's copy_ even when no torch impl is compared,
    # so a case's % of copy does not depend on --impls
    pytest.importorskip("torch")
    path = tmp_path / "r.json"
    assert cli.main([*TINY, "--ops", "layer_norm", "--impls", "jln-xla", "--dtypes", "float32",
                     "--directions", "fwd", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    (copy,) = [r for r in report["results"] if r["impl"] == "copy"]
    assert {"xla_gbps", "torch_gbps"} <= set(copy), copy
    assert copy["gbps"] >= max(copy["xla_gbps"], copy["torch_gbps"]) * (1 - 1e-12)
    assert report["torch_threads"] >= 1


def test_one_floor_per_shape_and_dtype(tiny_report: dict) -> None:
    # every record's copy_gbps, floor_us and pct_of_copy follow from its shape's copy record,
    # which holds the best of the first copy timing and every copy re-timed beside a case
    copies = {(tuple(r["shape"]), r["dtype"]): r for r in tiny_report["results"] if r["impl"] == "copy"}
    cases = [r for r in tiny_report["results"] if r["impl"] != "copy"]
    assert cases
    for (shape, dtype), c in copies.items():
        assert c["median_us"] <= c["first_us"]
        assert c["gbps"] == pytest.approx(c["bytes"] / c["median_us"] / 1e3, rel=1e-12)
        # one timing first, then one per (op, direction) that had an implementation to time
        timed = {(r["op"], r["direction"]) for r in cases if tuple(r["shape"]) == shape and r["dtype"] == dtype}
        assert c["copy_timings"] == 1 + len(timed)
    for r in cases:
        c = copies[(tuple(r["shape"]), r["dtype"])]
        assert r["copy_gbps"] == c["gbps"]
        assert r["pct_of_copy"] == pytest.approx(100 * r["gbps"] / c["gbps"], rel=1e-12)
        assert r["floor_us"] == pytest.approx(c["median_us"] * r["bytes"] / c["bytes"], rel=1e-12)
        assert r["above_floor"] == (r["pct_of_copy"] > 100)


def _rec(impl: str, us: float, *, op: str = "layer_norm", direction: str = "fwd", rows: int = 1024,
         width: int = 256, dtype: str = "float32") -> dict:
    nbytes = _bench.bytes_moved("layer_norm" if op == "copy" else op, rows, width, jnp.dtype(dtype).itemsize,
                                direction)
    return {"impl": impl, "op": op, "shape": [rows, width], "dtype": dtype, "direction": direction,
            "median_us": us, "min_us": us, "gbps": nbytes / us / 1e3, "pct_of_copy": None, "bytes": nbytes,
            "residual_bytes_per_elem": 4.0, "faults_per_call": 0.0}


def _report(results: list[dict], **extra: object) -> dict:
    return {"device": {"platform": "cpu", "name": "test", "cores": 1, "torch_device": None}, "versions": {},
            "skipped": [], "results": results, **extra}


def test_apply_floor_uses_the_copy_record() -> None:
    copy = _rec("copy", 100.0, op="copy")  # 2 MiB in 100 us
    fwd, both = _rec("jln", 80.0), _rec("jln", 300.0, direction="fwd+bwd")
    _bench.apply_floor([copy, fwd, both])
    assert fwd["copy_gbps"] == both["copy_gbps"] == copy["gbps"]
    assert fwd["pct_of_copy"] == pytest.approx(125.0) and fwd["above_floor"] is True
    assert fwd["floor_us"] == pytest.approx(100.0)
    assert both["floor_us"] == pytest.approx(150.0)  # 3·M·N·b against the copy's 2·M·N·b
    assert both["pct_of_copy"] == pytest.approx(50.0) and both["above_floor"] is False
    lone = _rec("jln", 80.0, width=512)  # no copy of its shape: no floor
    _bench.apply_floor([lone])
    assert lone["pct_of_copy"] is None and lone["copy_gbps"] is None


def test_markdown_floor_column_and_flags() -> None:
    results = [_rec("copy", 100.0, op="copy"), _rec("jln", 80.0), _rec("jln", 300.0, direction="fwd+bwd"),
               _rec("flax", 90.0), _rec("flax", 400.0, direction="fwd+bwd")]
    _bench.apply_floor(results)
    md = _bench.markdown(_report(results))
    gbps = results[0]["gbps"]
    # the floor for each direction's bytes: 100 us forward, 150 us for the backward's 3·M·N·b
    assert f"| 1024×256 | float32 | fwd | 100 ({gbps:.1f}) |" in md, md
    assert f"| 1024×256 | float32 | fwd+bwd | 150 ({gbps:.1f}) |" in md, md
    # above 100% of copy is said, not silent
    assert "Above 100% of copy" in md and "| jln | layer_norm | 1024×256 | float32 | fwd | 125 |" in md, md
    assert "Partial results" not in md
    assert "Partial results" in _bench.markdown(_report(results, interrupted=True))
    # the floor is described as what the report holds: per case before apply_floor's reports
    assert "per case, the better of the shape's first copy" in md
    results[0]["copy_timings"] = 2
    assert "the best copy the run measured of the shape" in _bench.markdown(_report(results))


def test_markdown_headline_wording_and_small_ratios() -> None:
    results = [_rec("copy", 100.0, op="copy"), _rec("jln", 1.0), _rec("flax", 400.0)]
    _bench.apply_floor(results)
    md = _bench.markdown(_report(results))
    assert "| layer_norm | float32 | fwd | 0.0025 |" in md, md  # not 0.00
    md = _bench.markdown(_report(results), headline=("flax",))
    assert "Ratios are **flax time ÷ other time**" in md and "jln time" not in md, md
    assert "| B/elem flax |" in md and "flax / flax" not in md, md
    md = _bench.markdown(_report(results), headline=("torch",))
    assert "No torch results in this report" in md and "| op | dtype |" not in md, md


@pytest.mark.parametrize("content, needle", [
    ('{"results": [], "summary": {}, "versions": {}, "device": "cpu"}', "device"),  # a jln parity --json file
    ("{}", "no 'device', 'versions', 'results'"),
    ("[1, 2]", "JSON list"),
])
def test_from_json_refuses_other_json(content: str, needle: str, tmp_path: pathlib.Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.json"
    path.write_text(content)
    assert cli.main(["--from-json", str(path), "--md", str(tmp_path / "x.md")]) == 2
    err = capsys.readouterr().err
    assert "is not a `jln bench --json` report" in err and needle in err, err
    assert not (tmp_path / "x.md").exists()


def test_from_json_with_json_is_refused(tiny_report: dict, tmp_path: pathlib.Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    src = pathlib.Path(tiny_report["_dir"]) / "r.json"
    assert cli.main(["--from-json", str(src), "--json", str(tmp_path / "out.json")]) == 2
    assert "drop --json" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["--budget-s", "-1"], "positive number of seconds"),
    (["--budget-s", "0"], "positive number of seconds"),
    (["--compile-budget-s", "nan"], "positive number of seconds"),
    (["--warmup", "-1"], "one integer >= 0"),
    (["--reps", "2,3"], "one positive integer"),
])
def test_single_number_flags(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "comma-separated" not in err, err


def test_flag_parsing_accepts_aliases_and_zero_warmup(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli._parser().parse_args(["--dtypes", "bf16,f32,f16", "--warmup", "0"])
    assert args.dtypes == ("bfloat16", "float32", "float16") and args.warmup == 0
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "% of copy" in out and "%%" not in out


def test_quick_config() -> None:
    # --quick: torch on one thread (as the committed CPU results), no impl this backend always skips
    cfg = cli.config_from_args(cli._parser().parse_args(["--quick"]))
    assert cfg.torch_threads == 1
    assert all(_bench_impls.backend_skip(i) is None for i in cfg.impls)
    if jax.default_backend() == "cpu":
        assert "jln-pallas" not in cfg.impls
    assert cli.config_from_args(cli._parser().parse_args(["--quick", "--torch-threads", "2"])).torch_threads == 2


def test_import_jln_does_not_load_the_bench() -> None:
    # the benchmark machinery lives under the console command; a program that normalizes
    # never loads it (nor the CLI at all)
    code = (
        "import sys, jax.numpy as jnp, jln\n"
        "jln.layer_norm(jnp.ones((2, 8)), eps=1e-6).block_until_ready()\n"
        "jln.rms_norm(jnp.ones((2, 8))).block_until_ready()\n"
        "bad = sorted(m for m in sys.modules if m == 'jln.cli' or m.startswith('jln.cli.'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env={**os.environ, "JLN_NATIVE": "0"})


def test_op_names_are_the_registrys_and_parity_s() -> None:
    from jln import _index

    # one spelling everywhere: jln bench takes every registry op under its registry name
    assert set(_bench_impls.OPS) == {op.name for op in _index.OPS}
    assert set(_bench_impls.DEFAULT_OPS) <= set(_bench_impls.OPS)
    parse = cli._parser().parse_args
    assert parse(["--ops", "rms_norm[llama]"]).ops == ("rms_norm[llama]",)
    fam = parse(["--ops", "adaptive_layer_norm"]).ops  # a family selects its variants, as in parity
    assert fam == ("adaptive_layer_norm[seed]", "adaptive_layer_norm[dit]", "adaptive_layer_norm[continuous]")


@pytest.mark.parametrize("argv, hint", [
    (["--ops", "rms_norm_llama"], "Did you mean 'rms_norm[llama]'"),
    (["--impls", "torch_compile"], "Did you mean 'torch-compile'"),
])
def test_unknown_names_get_a_did_you_mean(argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert hint in capsys.readouterr().err


@pytest.mark.parametrize("op", _bench_impls.OPS)
def test_every_op_runs_in_jln_and_its_baselines_agree(op: str) -> None:
    # each op's jln function and every baseline that provides it compute the same thing on
    # the harness's inputs (float32, tight tolerance): the bench compares like with like
    torch = pytest.importorskip("torch")
    # (64 rows: the batched ops' statistics then span 8 rows, where flax's one-pass variance
    # (InstanceNorm) stays within the tolerance; over 2 rows it cancels catastrophically)
    data = _bench.make_data(64, 64, jnp.float32, 1)
    p, _ = _bench.op_inputs(op, data, 0)
    with _bench.standard_promotion():
        one_path = not _index.BY_NAME[op].takes_impl
        ref = [np.asarray(o) for o in _bench_impls.jax_op("jln" if one_path else "jln-xla", op)(p)]
        others = []
        for impl in ("flax", "jnp"):
            try:
                others.append((impl, _bench_impls.jax_op(impl, op)(p)))
            except _bench_impls.Skip:
                pass
    tp = {k: torch.from_numpy(np.array(v)) for k, v in p.items()}
    others.append(("torch", _bench_impls.torch_op(op)(tp)))
    assert len(others) >= 1
    for impl, outs in others:
        assert len(outs) == len(ref), impl
        for o, r in zip(outs, ref, strict=True):
            o = o.detach().numpy() if hasattr(o, "detach") else np.asarray(o)
            np.testing.assert_allclose(o, r, rtol=2e-5, atol=2e-5, err_msg=f"{impl} {op}")


def test_tables_go_to_stdout_also_with_output_files(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    assert cli.main([*TINY, "--ops", "layer_norm", "--impls", "jln-xla", "--dtypes", "float32",
                     "--directions", "fwd", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| layer_norm | float32 | fwd |" in out or "layer_norm, median" in out, out
    assert f"wrote {path}" in out


def test_markdown_has_a_per_shape_table_for_every_op(tiny_report: dict) -> None:
    # the per-shape µs table was written for layer_norm alone (hard-coded): every op gets one
    md = pathlib.Path(tiny_report["_dir"], "r.md").read_text()
    for op in ("layer_norm", "add_rms_norm[torch]"):
        assert f"{op}, median µs (GB/s):" in md, md
        head = md.split(f"{op}, median µs (GB/s):", 1)[1]
        assert "| 64×256 | float32 | fwd |" in head.split("\n\n", 2)[1], head[:400]
