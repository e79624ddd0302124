"""The harness against real SGLang servers of other releases, started on the H200
(tests/data/gpu_results/2026-12-02, tools/gpu/e2e.py on pristine bundles of v0.5.13.post1,
v0.5.14 and v0.5.16: docs/results/gpu.md, "fourth session").  Each run is the 27B-shaped Qwen3.5
target with a DFlash drafter and the incident's known-good flags at two
--mem-fraction-static values; the probe recorded every free-memory reading in bytes.
(tests/gpu/test_harness_vs_h200.py does the same for the v0.5.12.post1 runs of 2026-12-01 and
the pin's of 2026-12-03.)

The harness runs the shipped scenario of these starts, ``h200-dflash-smoke``, at each run's
--mem-fraction-static: its readings and its ``[draft] weights_gib`` are first checked against
the probe's (the pre-load reading, the reading before the drafter starts, and what the
drafter's start took from it before v0.5.14's sizing read it), so nothing the server printed
about its sizing goes in.  The expectations are what each server logged: its KV tokens,
running requests and Mamba slots, or its refusal word for word (the remedy value included).
Before the drafter's footprint was modelled (harness/draft_reading.py) the harness gave
49,271 tokens for the v0.5.14/v0.5.16 start at 0.725 and a start for the refused one."""

import json
from pathlib import Path

import pytest

from sgl_overlay.harness import Outcome, load_scenario, run_scenario
from sgl_overlay.harness.reading_gaps import GIB, sizing_readings

RESULTS = Path(__file__).resolve().parents[1] / "data/gpu_results/2026-12-02"
SCENARIO = "h200-dflash-smoke"
RUNS = [(release, folder, case) for release, folder in (("0.5.13.post1", "r13"), ("0.5.14", "r14"), ("0.5.16", "r16"))
        for case in ("dflash-smoke", "dflash-smoke-release", "dflash-smoke-raised")
        if any(c["name"] == case for c in json.loads((RESULTS / folder / "e2e.json").read_text())["cases"])]


def _run(folder, case):
    report = json.loads((RESULTS / folder / "e2e.json").read_text())
    return next(c for c in report["cases"] if c["name"] == case)["runs"]["pristine"]


def _measured(run):
    """(pre-load reading, the reading before the drafter starts, the drafter's share), bytes:
    where the drafter's first reading comes before the sizing's, the target side ends there and
    the share is what the sizing read below it; otherwise the sizing read first (share 0)."""
    readings = run["probe"]["free_readings"]
    pre, sizing = sizing_readings(readings)
    first_drafter = next(i for i, r in enumerate(readings) if r["draft"] is True)
    sizing_at = next(i for i, r in enumerate(readings) if r["bytes"] == sizing and r["draft"] is False)
    before_drafter = readings[first_drafter]["bytes"] if first_drafter < sizing_at else sizing
    return pre, before_drafter, before_drafter - sizing


def test_the_runs_are_there():
    assert {(r, c) for r, _, c in RUNS} >= {("0.5.13.post1", "dflash-smoke"), ("0.5.14", "dflash-smoke-release"),
                                           ("0.5.14", "dflash-smoke-raised"), ("0.5.16", "dflash-smoke-release"),
                                           ("0.5.16", "dflash-smoke-raised")}


@pytest.mark.parametrize("release,folder,case", RUNS, ids=[f"{r}-{c}" for r, _, c in RUNS])
def test_the_scenario_gives_the_probes_readings(release, folder, case):
    """The shipped scenario's readings are the probe's, to the byte; its drafter footprint is the
    share measured where the release sizes after the drafter, to the scenario's 3 decimals."""
    sc = load_scenario(SCENARIO)
    pre, before_drafter, share = _measured(_run(folder, case))
    assert (sc.gpu["pre_load_free_gib"] * GIB, sc.gpu["post_load_free_gib"] * GIB) == (pre, before_drafter)
    if share:
        assert round(share / GIB, 3) == sc.draft["weights_gib"]


@pytest.mark.parametrize("release,folder,case", RUNS, ids=[f"{r}-{c}" for r, _, c in RUNS])
def test_harness_gives_what_the_server_logged(release_tree, release, folder, case):
    run = _run(folder, case)
    sc = load_scenario(SCENARIO)
    sc.server["mem_fraction_static"] = run["log_figures"]["server_args"]["mem_fraction_static"]
    got = run_scenario(release_tree(release), sc, verify_remedy=False)
    logged = run["log_figures"]
    if run["healthy"]:
        assert got.outcome is Outcome.OK, got.reason
        assert {k: got.figures[k] for k in ("max_total_num_tokens", "max_running_requests",
                                               "max_mamba_cache_size")} == {
            "max_total_num_tokens": logged["max_total_num_tokens"],
            "max_running_requests": logged["max_running_requests"],
            "max_mamba_cache_size": logged["mamba_cache"][0]["max_mamba_cache_size"]}
        assert logged["kv_cache"][0]["tokens"] == logged["max_total_num_tokens"]
    else:
        (error,) = logged["errors"]
        kind, _, message = error.partition(": ")
        assert got.outcome is Outcome.REFUSED
        assert got.reason.startswith(kind + " at ") and got.reason.endswith(": " + message), got.reason


def test_the_drafter_share_is_the_drafters_start():
    """On v0.5.14 and v0.5.16 the sizing read 3.58 GiB below the drafter's first reading: its
    weights, as its own load logged them (3,743,416,320 B, "mem usage=3.49 GB"), and 104,857,600 B
    its start allocated after them.  On v0.5.13.post1 it read before the drafter started (0)."""
    for release, folder, case in RUNS:
        run = _run(folder, case)
        share = _measured(run)[2]
        readings = [r for r in run["probe"]["free_readings"] if r["draft"] is True and r["caller"] == "load_model"]
        weights = readings[0]["bytes"] - readings[-1]["bytes"]
        assert weights == 3_743_416_320
        if release == "0.5.13.post1":
            assert share == 0
        else:
            assert share == weights + 104_857_600


def test_the_pre_load_gap_is_the_stream_pool_on_every_release():
    """docs/results/regress.md, "What the releases' code runs between the readings": the one CUDA call
    between the sizing's pre-load reading and "Load weight begin" is the first torch.cuda.Stream(),
    which makes PyTorch create its stream pool outside the caching allocator.  Measured alone
    (tools/gpu/pre_gap_check.py on the H200, either order against the first matmul) it takes
    73,400,320 B and a second Stream() nothing; every target start of v0.5.13.post1, v0.5.14 and
    v0.5.16 shows exactly that gap, as v0.5.12.post1's did (free_readings.json of 2026-12-01)."""
    check = json.loads((RESULTS / "pre_gap_check.json").read_text())
    for order in check["orders"].values():
        drops = {d["step"]: d for d in order["deltas"]}
        assert drops["stream"]["free_drop"] == drops["stream"]["outside_allocator"] == 73_400_320
        assert drops["stream_again"]["free_drop"] == 0
    seen = set()
    for folder in ("r13", "r14", "r16"):
        for case in json.loads((RESULTS / folder / "e2e.json").read_text())["cases"]:
            readings = case["runs"]["pristine"]["probe"]["free_readings"]
            pre = sizing_readings(readings)[0]
            begin = next(r["bytes"] for r in readings if r["draft"] is False and r["caller"] == "load_model")
            assert pre - begin == 73_400_320, (folder, case["name"])
            seen.add((folder, case["name"]))
    assert ("r16", "dense") in seen and ("r13", "dflash-smoke") in seen
