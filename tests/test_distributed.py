"""Norms over sharded arrays on 8 host CPU devices (shard_map, pmap, jit + NamedSharding).

XLA_FLAGS must be set before JAX initialises, so the measurements run once in a subprocess
(``tests/_distributed_checks.py``, about a minute on 2 cores) that prints JSON; the tests here
hold the tolerances. References: the same jln call on the unsharded array and independent
float64 NumPy formulas.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("_distributed_checks.py")
MARK = "JLN_DISTRIBUTED_RESULTS "
# every test reads the one subprocess run (its fixture takes most of this file's time)
pytestmark = pytest.mark.slow

PALLAS_OPS = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")  # add+norm: the fused-add kernels


@pytest.fixture(scope="module")
def results() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(MARK))
    return json.loads(line[len(MARK):])


def _tol(entry: dict) -> float:
    # float32 rounding: a few ulps of the largest reference value
    return 2e-6 * max(1.0, entry["ref_scale"])


def test_shard_map_matches_unsharded(results: dict) -> None:
    """Forward and every gradient of each op with the hidden axis split equal the unsharded run."""
    entries = results["shard_map"]
    assert {e["op"] for e in entries} >= {
        "layer_norm", "rms_norm_torch", "rms_norm_seed", "rms_norm_gemma", "add_layer_norm",
        "add_rms_norm", "adaptive_layer_norm", "layer_norm axis=(-2,-1)", "linen.LayerNorm",
        "nnx.RMSNorm", *(f"{api}.{m}" for api in ("linen", "nnx") for m in (
            "AdaptiveLayerNorm", "AdaLNZero", "AdaLNZero single", "AdaLNContinuous", "AdaLNContinuous rms"
        )),
    }
    bad = []
    for e in entries:
        for key in ("fwd", "dx", "dresidual", "dscale", "dbias", "demb"):
            if key in e and not e[key] <= _tol(e) * (4 if key.startswith("d") and key != "dx" else 1):
                bad.append((e["op"], e["layout"], key, e[key]))
    assert not bad, bad


def test_adaptive_modules_need_the_chunk_layout(results: dict) -> None:
    """The adaptive modules under tensor parallelism match the unsharded module only with the
    projection laid out by shard_chunks; the plain column split gives wrong chunks."""
    adaptive = [e for e in results["shard_map"] if "shard_chunks" in e["layout"]]
    assert len(adaptive) == 10
    assert all(e["fwd"] <= _tol(e) for e in adaptive), adaptive
    assert results["adaptive_naive_layout_error"] > 0.1


def test_shard_chunks_takes_explicitly_sharded_arrays(results: dict) -> None:
    """shard_chunks(inverse=True) on a kernel sharded over an explicit mesh axis (it raised
    JAX's ShardingTypeError) gives the unsharded values and keeps the sharding."""
    got = results["shard_chunks_explicit"]
    assert set(got) == {"eager", "jit"}
    for e in got.values():
        assert e["max_diff"] == 0 and e["spec"].replace("PartitionSpec", "P") == "P(None, 'tp')", got


def test_sharded_layer_norm_keeps_pivot_accuracy(results: dict) -> None:
    """x = 3e4 + N(0, 1): the merged statistics are as accurate as the unsharded ones."""
    for e in results["shard_map"]:
        if "fwd_vs_float64" in e:
            assert e["fwd_vs_float64"] < 2e-6, e
            if "unsharded_fwd_vs_float64" in e:
                assert e["fwd_vs_float64"] <= 2 * e["unsharded_fwd_vs_float64"] + 1e-7, e
        if "near_mean_vs_float64" in e:  # N(0, 1) rows, |y| < 0.05: torch-like (it was ~3e-7)
            assert e["near_mean_vs_float64"] <= 5e-8 and e["unsharded_near_mean_vs_float64"] <= 5e-8, e


def test_axis_index_groups_under_pmap(results: dict) -> None:
    entries = [e for e in results["shard_map"] if e["layout"].startswith("pmap")]
    assert {e["op"] for e in entries} == {"layer_norm", "rms_norm_seed"}
    for e in entries:
        assert e["fwd"] <= _tol(e) and e["dx"] <= _tol(e), e


def test_parameter_gradients_under_data_and_sequence_parallelism(results: dict) -> None:
    """shard_map (check_vma=True) psums parameter gradients over the row axes itself; with
    check_vma=False (or pmap) the user's psum over the row axes gives the same result; without
    it the gradients are wrong, so the check can fail."""
    layouts = {e["layout"]: e for e in results["grads"]}
    assert set(layouts) == {"dp2_tp4", "dp2_sp4", "sp2_tp4"}
    for e in layouts.values():
        tol = 4 * _tol(e)
        assert e["vma_auto"] <= tol, e
        assert e["manual_psum"] <= tol, e
        assert e["no_psum"] > 0.1, e


def test_jit_named_sharding_correct_and_never_gathers_the_activation(results: dict) -> None:
    entries = results["jit"]
    assert len(entries) == 16
    for e in entries:
        tol = _tol(e)
        assert e["fwd"] <= tol and e["dx"] <= tol and e["dparams"] <= 4 * tol, e
        for c in e["collectives"]:
            # a gathered (or all-reduced) activation would move >= one shard of x
            assert c["elements"] < e["activation_elements"] // 8, (e["op"], e["layout"], c)


def test_pallas_on_explicit_meshes_runs_per_shard(results: dict) -> None:
    """impl='pallas' (interpret mode) with rows split over an explicit mesh: forward, dx and
    parameter gradients equal the unsharded XLA path, the output keeps x's sharding, and the
    only collective is the parameter gradients' all-reduce (no gather of the activation)."""
    entries = results["pallas"]
    assert {(e["op"], e["layout"]) for e in entries} == {
        (op, lay) for op in PALLAS_OPS for lay in ("batch", "sequence")
    }
    for e in entries:
        tol = _tol(e)
        assert e["fwd"] <= tol and e["dx"] <= tol and e["dparams"] <= 4 * tol, e
        assert e["kernel_in_hlo"], e
        assert "'m'" in e["out_sharding"], e
        assert [c["op"] for c in e["collectives"]] == ["all-reduce"], e
        assert all(c["elements"] <= 32 for c in e["collectives"]), e


def _auto(results: dict, layouts: tuple[str, ...]) -> list[dict]:
    entries = [e for e in results["pallas_auto"] if e["layout"] in layouts]
    assert {(e["op"], e["layout"]) for e in entries} == {
        (op, lay) for op in PALLAS_OPS for lay in layouts
    }
    for e in entries:
        tol = _tol(e)
        assert e["fwd"] <= tol and e["dx"] <= tol and e["dparams"] <= 4 * tol, e
        assert e["kernel_in_hlo"], e
    return entries


def test_pallas_on_auto_meshes_partitions_by_rows(results: dict) -> None:
    """impl='pallas' with rows split over an AxisType.Auto mesh (XLA's partitioner decides):
    the kernels run on each device's rows (custom_partitioning), equal the unsharded XLA path,
    keep x's sharding, and the only collective is one all-reduce of per-feature gradients."""
    for e in _auto(results, ("batch", "sequence")):
        assert "'m'" in e["out_sharding"], e
        assert [c["op"] for c in e["collectives"]] == ["all-reduce"], e
        assert all(c["elements"] == 32 for c in e["collectives"]), e  # [1, 1, D] per parameter


def test_pallas_on_auto_meshes_gathers_only_a_split_hidden_axis(results: dict) -> None:
    """Documented fallback: a split normalized axis is all-gathered (only that axis: rows
    split over another mesh axis stay split) and the results are still exact."""
    sizes = {"hidden": 1, "data2_hidden4": 2}  # devices the rows are split over
    for e in _auto(results, tuple(sizes)):
        gathers = [c["elements"] for c in e["collectives"] if c["op"] == "all-gather"]
        assert gathers and max(gathers) == e["activation_elements"] // sizes[e["layout"]], e
        assert all(c["elements"] <= 32 for c in e["collectives"] if c["op"] != "all-gather"), e


def test_pallas_on_auto_meshes_partitions_conditions_and_vmap(results: dict) -> None:
    """Per-example conditions (adaLN's [B, 1, D]) follow x's rows: no collective with the batch
    split, one all-reduce of the per-example gradients ([B, 1, D] each) with the sequence
    split; under jax.vmap(grad) the per-example parameter gradients ([2, 1, D]) are all-reduced,
    never x. Every result equals the unsharded XLA path."""
    got = {e["layout"]: e for e in results["pallas_auto_more"]}
    assert set(got) == {"adaptive batch", "adaptive sequence", "vmap sequence"}
    for e in got.values():
        assert e["max_diff"] <= 4 * _tol(e), e
        assert all(c["op"] == "all-reduce" for c in e["collectives"]), e
    assert got["adaptive batch"]["collectives"] == []
    assert [c["elements"] for c in got["adaptive sequence"]["collectives"]] == [8 * 32]
    assert [c["elements"] for c in got["vmap sequence"]["collectives"]] == [2 * 32]


def test_pallas_declines_a_split_hidden_axis(results: dict) -> None:
    kind, msg = results["errors"]["pallas_hidden"]
    assert kind == "ValueError" and "impl='xla'" in msg and "split over mesh axes" in msg


def test_explicit_hidden_sharding_uses_one_collective_each_way(results: dict) -> None:
    for e in results["jit"]:
        if e["axis_types"] != "Explicit" or "hidden" not in e["layout"]:
            continue
        ops = [c["op"] for c in e["collectives"]]
        if e["op"] == "layer_norm":  # forward: the row statistics; backward: two per-row sums
            assert ops.count("all-gather") == 1 and "reduce-scatter" not in ops, e
        else:
            assert "all-gather" not in ops and "reduce-scatter" not in ops, e


def test_shard_map_collectives(results: dict) -> None:
    h = {k: [c["op"] for c in v] for k, v in results["hlo_shard_map"].items()}
    assert h["layer_norm_fwd"] == ["all-gather"]
    # the backward's one all-reduce holds both per-row sums of the normalized row's derivative
    # (the gathered statistics get no cotangent, so there is no reduce-scatter)
    assert sorted(h["layer_norm"]) == ["all-gather", "all-reduce"]
    assert h["rms_norm_torch_fwd"] == ["all-reduce"]
    # forward+backward: the sum of squares and the backward's projection, both per-row vectors,
    # as two all-reduces (XLA could merge them while the projection's sum did not depend on
    # rstd; never a gather of x)
    assert set(h["rms_norm_torch"]) == {"all-reduce"} and len(h["rms_norm_torch"]) <= 2


def test_gradients_of_rows_near_float32_overflow(results: dict) -> None:
    """Rows with std 1e18 split over 8 devices: dx and the JVP tangent to float32 rounding of
    the float64 derivative (1-5% off before its row means were taken in one rule, psummed)."""
    entries = results["near_overflow"]
    assert {e["op"] for e in entries} == {"layer_norm", "rms_norm_torch"}
    assert all(e["vjp"] <= 1e-5 and e["jvp"] <= 1e-5 for e in entries), entries


def test_reverse_mode_saves_only_x_and_row_statistics(results: dict) -> None:
    for r in results["residuals"].values():
        local = "f32[" + ",".join(map(str, r["local_shape"])) + "]"
        full_size = [ln for ln in r["lines"] if ln.startswith(local)]
        assert len(full_size) == 1 and "from the argument x" in full_size[0], r
        assert any("jln.rstd" in ln for ln in r["lines"]), r
        assert len(r["lines"]) <= 4, r
    assert any("jln.shard_stats" in ln for ln in results["residuals"]["layer_norm"]["lines"])


def test_errors(results: dict) -> None:
    err = results["errors"]
    assert err["unbound"][0] == "NameError" and "shard_map" in err["unbound"][1]
    assert err["unbound_rms_jit"][0] == "NameError" and "axis_name=None" in err["unbound_rms_jit"][1]
    assert err["groups_without_name"][0] == "ValueError"
    assert err["list_name"][0] == "TypeError"
    assert err["bad_groups"][0] == "ValueError" and "equal groups" in err["bad_groups"][1]
