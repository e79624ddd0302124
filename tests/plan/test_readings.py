"""The planner's model of the readings (harness/readings.py, the same as the harness's): a plan from a
log's two lines gives the real start-up's figures within their rounding on the H200; an estimate from a
config.json and a GPU name spans what that GPU's start can take before "Load weight begin", and the
verdict is the span's pessimistic end (docs/plan.md, "Readings")."""

import json
from pathlib import Path

import pytest

from sgl_overlay.harness.readings import ReadingKind
from sgl_overlay.planner import core, deployment, plan

from .helpers import DFLASH, LLAMA8B, PIN, QWEN36, cli, cli_json

RECORD = Path(__file__).resolve().parents[1] / "data/gpu_results/2026-12-01/e2e-h200-16.json"
# the release that start ran (a release-matrix test, docs/testing.md): its patched wheel's version
RECORD_RELEASE = json.loads(RECORD.read_text())["patched_wheel"].split("-")[1].split("+")[0]
# the H200 start's command line (tools/gpu/e2e_cases.py "h200-16"), and SGLang's own fraction for the card
H200_16 = ("--tp-size 1 --page-size 1 --context-length 32768 --speculative-algorithm DFLASH "
           "--speculative-dflash-block-size 16 --disable-radix-cache --mamba-scheduler-strategy no_buffer "
           "--max-running-requests 16 --disable-cuda-graph --mem-fraction-static").split()


def test_a_plan_from_the_h200_s_log_lines_is_the_real_start():
    """v0.5.12.post1 on the H200 (2026-12-01, h200-16; the release that record ran): the plan given only the log's "Load weight begin" /
    "Load weight end" lines (138.61 / 87.36, --readings logged) holds the server's 277,916 KV tokens,
    16 requests and 16 Mamba slots; the span's whole width is the lines' rounding (the H200's pool is
    measured, the RoPE pre-expansion exact)."""
    assert RECORD_RELEASE == "0.5.12.post1"
    run = json.loads(RECORD.read_text())["cases"][0]["runs"]["pristine"]
    f = run["log_figures"]
    free = f"{f['load_begin_avail_gib']},{f['load_end_avail_gib']}"
    code, rep, err = cli_json(QWEN36, "--draft", DFLASH, "--gpu", "H200", "--free-gib", free, "--readings", "logged",
                              "--release", RECORD_RELEASE, "--no-suggest", "--no-sensitivity", "--",
                              *H200_16, str(f["server_args"]["mem_fraction_static"]))
    assert code == 0, err
    assert rep["readings"]["kind"] == "logged" and rep["ledger"]["readings"] == "logged"
    wide = {t["name"] for t in rep["readings"]["terms"] if t["lo_bytes"] != t["hi_bytes"]}
    assert wide == {"rounding"}
    span = rep["range"]["figures"]
    logged = {"max_total_num_tokens": f["max_total_num_tokens"], "max_running_requests": f["max_running_requests"],
              "max_mamba_cache_size": f["mamba_cache"][0]["max_mamba_cache_size"]}
    assert all(span[k][0] <= v <= span[k][1] for k, v in logged.items()), (span, logged)
    # the ledger is the pessimistic end: the least of the span
    assert rep["ledger"]["kv_tokens"] == span["max_total_num_tokens"][0]


def test_an_estimate_on_an_unmeasured_gpu_is_judged_at_its_pessimistic_end():
    """Llama-3.1-8B on an H100 (a config and a GPU name): the estimate is of "Load weight begin", the
    stream pool on an H100 is not measured (0-140 MiB), so the plan spans it.  At a fraction between the
    two ends' thresholds (1 - post / pre at each end, from the plan's own readings) the optimistic end
    starts and the pessimistic one does not: the verdict is "will not start"."""
    first = core.size(deployment(model=LLAMA8B, gpu="H100", argv=["--mem-fraction-static", "0.9"], release=PIN),
                      span=True)
    r = first.readings
    assert r["kind"] == ReadingKind.LOGGED and not r["exact"]
    (pool,) = [t for t in r["terms"] if t["name"] == "stream pool"]
    assert pool["lo_bytes"] == 0 < pool["hi_bytes"] and "not measured" in pool["source"]
    assert first.range["figures"]["max_total_num_tokens"][0] < first.range["figures"]["max_total_num_tokens"][1]
    (pre_lo, pre_hi), (post_lo, post_hi) = r["pre_gib"], r["post_gib"]
    pessimistic, optimistic = 1 - post_lo / pre_hi, 1 - post_hi / pre_lo
    assert optimistic < pessimistic
    mfs = round((optimistic + pessimistic) / 2, 5)
    rep = plan(deployment(model=LLAMA8B, gpu="H100", argv=["--mem-fraction-static", str(mfs)], release=PIN),
               with_suggestions=False, with_sensitivity=False)
    assert rep["verdict"] == core.WONT and rep["outcome"] == "refused"
    assert rep["range"]["optimistic"]["outcome"] == "ok"


def test_an_estimate_on_the_h200_takes_the_measured_pool():
    """On the H200 the pool is the measured 73,400,320 B: an estimate (no rounding) is one exact run."""
    dep = deployment(model=LLAMA8B, gpu="H200", argv=["--mem-fraction-static", "0.9"], release=PIN)
    s = core.size(dep, span=True)
    assert s.readings["exact"] and s.range is None
    (pool,) = [t for t in s.readings["terms"] if t["name"] == "stream pool"]
    assert pool["lo_bytes"] == pool["hi_bytes"] == 73_400_320
    assert s.readings["pre_used_gib"] == pytest.approx(dep.memory.pre_free_gib + 70 / 1024, abs=1e-12)
    assert s.ledger["sizing_pre_reading_gib"] == round(s.readings["pre_used_gib"], 4)


def test_readings_logged_needs_free_gib():
    code, out, err = cli(LLAMA8B, "--gpu", "H200", "--readings", "logged", "--release", PIN, "--",
                         "--mem-fraction-static", "0.9")
    assert code == 2 and "--readings logged" in err and "--free-gib" in err
