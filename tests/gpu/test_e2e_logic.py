"""tools/gpu/e2e.py's own logic (log and ledger parsing, outcome, case checks, table) on CPU,
against start-up logs recorded on the H200 (tests/gpu/data, docs/results/gpu.md)."""
import json
from pathlib import Path


from tests.gpu.e2e_script import e2e_cases, e2e_log

DATA = Path(__file__).parent / "data"


def test_missing_module_is_a_failure_not_a_refusal():
    f = e2e_log.parse_log((DATA / "ipython-missing.log").read_text())
    assert f["errors"] == ["ModuleNotFoundError: No module named 'IPython'"]
    assert e2e_log.outcome({"healthy": False, "log_figures": f}) == "failed"


def test_pairs():
    assert e2e_log._pairs("#tokens: 11893, K size: 1.23 GB, V size: 1.23 GB") == {"tokens": 11893, "K_size_gib": 1.23, "V_size_gib": 1.23}


def test_check_case_zero_requests():
    case = e2e_cases.CASES["zero-requests-dflash"]
    # the pin's (v0.5.17) own refusal, as its kv_cache_configurator.py raises it for the incident's flags
    # (tools/regress.py --scenario zero-requests-dflash on the pristine tree)
    pr = {"healthy": False, "log_figures": e2e_log.parse_log(
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
        "max_mamba_cache_size=0 (total_rest_memory=4.06 GB, mamba_cache_per_req=146.81 MB).\n")}
    pa = {"healthy": False, "log_figures": e2e_log.parse_log("RuntimeError: Not enough GPU memory to start: x\nremedy: --max-running-requests = 2\n")}
    ok = {"healthy": True, "requests_ok": True, "log_figures": e2e_log.parse_log("")}
    c = e2e_cases.check_case(case, {"pristine": pr, "patched": pa, "patched+remedy": ok})
    assert c["pass"], c
    assert "patched refused with remedy --max-running-requests 2" in c["why"]
    pa_bad = {"healthy": False, "log_figures": e2e_log.parse_log("AssertionError: max_running_request is zero\n")}
    assert not e2e_cases.check_case(case, {"pristine": pr, "patched": pa_bad})["pass"]
    # v0.5.12.post1's assertion is that release's failure, not the pin's
    old_pin = {"healthy": False, "log_figures": e2e_log.parse_log("AssertionError: max_running_request is zero\n")}
    assert not e2e_cases.check_case(case, {"pristine": old_pin, "patched": pa, "patched+remedy": ok})["pass"]


def test_table_of_recorded_report():
    report = json.loads((DATA / "e2e-ipython-missing.json").read_text())
    t = e2e_cases.table(report)
    assert t.count("| failed |") == 6 and "FAIL" in t


def test_a_plain_run_checks_the_issue_s_cases_and_the_measurements_run_by_name():
    """`--cases` defaults to the check itself; the rope-* measurement cases (four more 27B-shaped
    starts) run only when named."""
    assert set(e2e_cases.DEFAULT_CASES) == {"dense", "zero-requests-dflash", "dflash-smoke", "h200-16"}
    assert set(e2e_cases.DEFAULT_CASES) < set(e2e_cases.CASES) and {"rope-262k", "rope-2k"} <= set(e2e_cases.CASES)


def test_a_refused_start_has_no_pools_to_hold_against_its_ledger():
    """dflash-smoke-raised on the pin (H200, 2026-12-03): the patched tree refused, its ledger (the
    refusal's) named pools that a refused start never allocates; only a started run is compared."""
    case = e2e_cases.CASES["dflash-smoke-raised"]
    pr = {"healthy": False, "log_figures": e2e_log.parse_log(
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.725.\n")}
    missing = [{"name": "mamba_states", "ledger_bytes": 3848601600, "allocated_bytes": None, "diff": None,
                "equal": False, "note": "in the ledger, no such pool allocated"}]
    pa = {"healthy": False, "pools_vs_ledger": missing, "log_figures": e2e_log.parse_log(
        "MemoryBudgetError: Not enough GPU memory to start: x\nremedy: --max-running-requests = 2\n")}
    ok = {"healthy": True, "requests_ok": True, "log_figures": e2e_log.parse_log(""), "pools_vs_ledger": []}
    assert e2e_cases.check_case(case, {"pristine": pr, "patched": pa, "patched+remedy": ok})["pass"]
    bad = dict(ok, pools_vs_ledger=missing)
    assert not e2e_cases.check_case(case, {"pristine": pr, "patched": pa, "patched+remedy": bad})["pass"]


def test_a_case_the_card_cannot_leave_its_memory_is_not_reproducible_never_failed():
    """The H100 of issue 40: zero-requests-dflash leaves 94.24 GiB free, more than an 80 GB card has.
    It runs on the card's whole memory; the incident's expectation (the pin's own error) is not
    judged, and the card-independent ones still are."""
    case = e2e_cases.CASES["zero-requests-dflash"]
    fits, note = e2e_cases.reproducible(case, 76.55)
    assert not fits and "not reproducible on this card" in note and "94.24 GiB" in note and "76.55 GiB" in note
    assert e2e_cases.reproducible(case, 139.4) == (True, None)
    assert e2e_cases.reproducible(e2e_cases.CASES["h200-16"], 76.55) == (True, None)   # no blocker: any card
    # the pin refuses with another error on the bigger share of memory; the patched tree states a
    # two-flag remedy, which starts
    pr = {"healthy": False, "log_figures": e2e_log.parse_log(
        "ValueError: Loaded weights leave no GPU memory ... Raise --mem-fraction-static above 0.765\n")}
    pa = {"healthy": False, "log_figures": e2e_log.parse_log(
        "RuntimeError: Not enough GPU memory to start: x\n"
        "remedy: --max-running-requests 3 --mem-fraction-static 0.925\n")}
    ok = {"healthy": True, "requests_ok": True, "log_figures": e2e_log.parse_log("")}
    c = e2e_cases.check_case(case, {"pristine": pr, "patched": pa, "patched+remedy": ok}, note)
    assert c["pass"] and not c["reproducible"], c
    assert "patched refused with remedy --max-running-requests 3 --mem-fraction-static 0.925" in c["why"]
    assert e2e_cases.verdict_word(c) == "PASS (NOT REPRODUCIBLE ON THIS CARD)"
    # ... but a remedy that does not start fails it, on any card
    failed = {"healthy": False, "log_figures": e2e_log.parse_log("torch.OutOfMemoryError: CUDA out of memory\n")}
    c = e2e_cases.check_case(case, {"pristine": pr, "patched": pa, "patched+remedy": failed}, note)
    assert not c["pass"] and e2e_cases.verdict_word(c) == "FAIL"
    # ... and so does a refusal whose remedy was never re-run
    assert not e2e_cases.check_case(case, {"pristine": pr, "patched": pa}, note)["pass"]


def test_do_no_harm_on_any_card():
    """What the pin starts, the patched tree must start: h200-16's flags, whatever the card."""
    case = e2e_cases.CASES["h200-16"]
    ok = {"healthy": True, "requests_ok": True, "log_figures": e2e_log.parse_log("")}
    pa = {"healthy": False, "log_figures": e2e_log.parse_log(
        "RuntimeError: Not enough GPU memory to start: x\nremedy: --max-running-requests = 4\n")}
    c = e2e_cases.check_case(case, {"pristine": ok, "patched": pa, "patched+remedy": ok})
    assert not c["pass"] and "do no harm: the pin starts it, the patched tree does not" in c["why"]
    assert e2e_cases.check_case(case, {"pristine": ok, "patched": ok})["pass"]


def test_a_remedy_of_several_flags_is_applied_whole():
    (rem,) = e2e_log.parse_log("remedy: --max-running-requests 3 --mem-fraction-static 0.925\n")["remedies"]
    assert rem == {"flag": "max-running-requests", "value": "3", "also": [{"flag": "mem-fraction-static", "value": "0.925"}]}
    flags = ["--max-running-requests", "16", "--context-length", "32768"]
    assert e2e_cases.with_remedy(flags, rem) == ["--max-running-requests", "3", "--context-length", "32768",
                                                 "--mem-fraction-static", "0.925"]
