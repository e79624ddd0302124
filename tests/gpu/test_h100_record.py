"""The H100 80GB start-ups of 2026-12-07 (tests/data/gpu_results/2026-12-07/h100-e2e: `tools/gpu/e2e.py
--cases h200-16` on the device's nvidia-h100-x1, the bundle of this stack), re-judged on the CPU: the case's
check on the record, the planner against every start-up (verdicts, figures, SGLang's own
--mem-fraction-static), and the harness's refusal and remedy against the patched server's."""

import json
from pathlib import Path

from sgl_overlay.harness import load_scenario, run_scenario, source_root

from tests.gpu.e2e_script import e2e_cases, e2e_log
from tests.gpu.test_e2e_plan import plan_mod

RECORD = Path(__file__).resolve().parents[1] / "data" / "gpu_results" / "2026-12-07" / "h100-e2e"


def _report():
    return json.loads((RECORD / "e2e.json").read_text())


def test_the_record_passes_its_check_on_the_cpu():
    report = _report()
    assert report["gpu"] == "NVIDIA H100 80GB HBM3"
    (case,) = report["cases"]
    runs = case["runs"]
    check = e2e_cases.check_case(e2e_cases.CASES[case["name"]], runs)
    assert check["pass"] and check == case["check"] | {"reproducible": True}, check
    # the patched refusal states one remedy of two flags, and its start served
    (rem,) = runs["patched"]["log_figures"]["remedies"]
    assert e2e_log.remedy_words(rem) == "--max-running-requests 5 --mem-fraction-static 0.941"
    assert e2e_log.outcome(runs["patched+remedy"]) == "ok" and runs["patched+remedy"]["requests_ok"]


def test_the_planner_equals_every_start_up(tmp_path, patched_tree):
    """The planner at the record's exact free bytes, with the card's name: the three start-ups' verdicts,
    KV tokens, requests, Mamba slots and cases, and SGLang's own --mem-fraction-static (0.7777278906249999:
    the flags do not give it)."""
    rc = plan_mod.main([str(RECORD), "--patched-tree", str(patched_tree), "--out", str(tmp_path)])
    res = {x["id"]: x for x in json.loads((tmp_path / "plan_vs_gpu.json").read_text())}
    assert set(res) == {"h200-16.pristine", "h200-16.patched", "h200-16.patched+remedy"}
    for rid, x in res.items():
        assert x.get("equal"), (rid, x)
    rows = {rid: {r["field"]: r["gpu"] for r in x["rows"]} for rid, x in res.items()}
    assert rows["h200-16.pristine"]["mem_fraction_static"] == 0.7777278906249999
    assert (rows["h200-16.patched+remedy"]["kv_tokens"], rows["h200-16.patched+remedy"]["running_requests"],
            rows["h200-16.patched+remedy"]["mamba_slots"]) == (33052, 5, 5)
    assert rc == 0


def test_the_harness_states_the_servers_remedy(patched_tree):
    """Scenario h100-16 (these readings) through the harness: the refusal's remedy is the server's line,
    and its re-run has the figures the GPU start-up had."""
    report = run_scenario(source_root(patched_tree), load_scenario("h100-16"))
    (check,) = report.remedies
    assert check.works and check.parsed.flags == "--max-running-requests 5 --mem-fraction-static 0.941"
    started = _report()["cases"][0]["runs"]["patched+remedy"]["log_figures"]
    f = check.rerun.figures
    assert (f["max_total_num_tokens"], f["max_running_requests"], f["max_mamba_cache_size"]) == (
        started["max_total_num_tokens"], started["max_running_requests"],
        started["mamba_cache"][0]["max_mamba_cache_size"])
