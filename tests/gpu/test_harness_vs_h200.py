"""The harness against reality: the start-ups recorded on the H200 on
2026-12-01 (tests/gpu/data/h200-2026-12-01, docs/results/gpu.md) re-run through
SGLang's real sizing code on a CPU, with the exact free bytes the patched
tree's ledger recorded there (scenarios h200-*.toml).  Every figure the
GPU's logs state must come out exactly: KV tokens, running requests and
Mamba slots, on v0.5.12.post1 (the release those start-ups ran) and on the
stack this repository kept for it (patched_tree_of); that release's failure and
the patched tree's refusal, with the same remedies.  A release-matrix test: it
runs on v0.5.12.post1 whatever the pin is.  The second half: the pin, v0.5.17,
against its own H200 records of 2026-12-03."""
from pathlib import Path

import pytest

from tests.gpu.e2e_script import e2e_log

from sgl_overlay.harness import Outcome, load_scenario, run_scenario, source_root

DATA = Path(__file__).parent / "data" / "h200-2026-12-01"
RELEASE = "0.5.12.post1"        # the release these start-ups ran on (the pin of those days)


def gpu(name):
    return e2e_log.parse_log((DATA / f"{name}.log").read_text())


def harness(tree, scenario):
    return run_scenario(source_root(tree), load_scenario(scenario), verify_remedy=False)


@pytest.fixture(scope="module", params=["pristine", "patched"])
def tree(request, release_tree, patched_tree_of):
    if request.param == "pristine":
        return release_tree(RELEASE), "pristine"
    return patched_tree_of(RELEASE), "patched"


@pytest.fixture(scope="module")
def recorded_patched(patched_tree_of):
    """The stack this repository kept for the release these start-ups ran on (tests/conftest.py)."""
    return patched_tree_of(RELEASE)


def test_the_stack_built_for_the_release_is_the_one_its_last_records_ran(recorded_patched):
    """patched_tree_of's stack for v0.5.12.post1 (this repository's history, EARLIER_PINS) is the stack
    of the patched wheel that the last records of 2026-12-01 name (its local label: the stack digest)."""
    import json

    from sgl_overlay import builder
    digest = builder.read_manifest(recorded_patched)["stack_digest"]
    for record in ("e2e-rope-262k.json", "e2e-lossless-float32.json"):
        wheel = json.loads((Path(__file__).parents[1] / "data" / "gpu_results" / "2026-12-01" / record).read_text())[
            "patched_wheel"]
        assert wheel.startswith(f"sglang-{RELEASE}+overlay.{digest[:12]}-"), (record, wheel, digest)


def test_the_recorded_logs_say_what_docs_gpu_md_says():
    smoke = {t: gpu(f"dflash-smoke.{t}") for t in ("pristine", "patched")}
    for f in smoke.values():
        assert (f["max_total_num_tokens"], f["max_running_requests"]) == (3079, 4)
        assert f["mamba_cache"][0]["max_mamba_cache_size"] == 24
        assert (f["load_begin_avail_gib"], f["load_end_avail_gib"]) == (93.57, 42.31)
    zero = gpu("zero-requests-dflash.pristine")
    assert "AssertionError: max_running_request is zero" in zero["errors"]
    assert zero["kv_cache"][0]["tokens"] == 2007 and zero["mamba_cache"][0]["max_mamba_cache_size"] == 0


def started_with_the_gpus_figures(tree, log, scenario):
    """The harness on that tree starts the scenario with the KV tokens, running requests
    and Mamba slots the GPU's start-up log states."""
    root, name = tree
    f = gpu(f"{log}.{name}")
    r = harness(root, scenario)
    got = r.figures
    assert r.outcome is Outcome.OK
    assert (got["max_total_num_tokens"], got["max_running_requests"], got["max_mamba_cache_size"]) == (
        f["max_total_num_tokens"], f["max_running_requests"], f["mamba_cache"][0]["max_mamba_cache_size"])


def test_dflash_smoke_figures_equal_the_gpus(tree):
    started_with_the_gpus_figures(tree, "dflash-smoke", "h200-dflash-smoke")


def test_zero_requests_on_the_release_is_the_gpus_failure(release_tree):
    f = gpu("zero-requests-dflash.pristine")
    r = harness(release_tree(RELEASE), "h200-zero-requests-dflash")
    got = r.figures
    assert r.outcome is Outcome.BROKEN
    assert got["max_running_requests"] == 0        # the GPU: AssertionError: max_running_request is zero
    assert (got["max_total_num_tokens"], got["max_mamba_cache_size"]) == (
        f["kv_cache"][0]["tokens"], f["mamba_cache"][0]["max_mamba_cache_size"])


def test_zero_requests_on_the_patched_tree_refuses_with_the_gpus_remedies(recorded_patched):
    f = gpu("zero-requests-dflash.patched")
    r = harness(recorded_patched, "h200-zero-requests-dflash")
    assert r.outcome is Outcome.REFUSED
    stated = [(x.parsed.flag, str(x.parsed.value)) for x in r.remedies]
    logged = list(dict.fromkeys(("--" + x["flag"].lstrip("-"), x["value"]) for x in f["remedies"]))  # logged twice
    assert stated == logged == [("--max-running-requests", "1"), ("--mem-fraction-static", "0.726")]


def test_h200_16_logs_say_what_docs_gpu_md_says():
    for t in ("pristine", "patched"):
        f = gpu(f"h200-16.{t}")
        assert (f["max_total_num_tokens"], f["max_running_requests"]) == (277916, 16)
        assert f["mamba_cache"][0]["max_mamba_cache_size"] == 16
        assert (f["load_begin_avail_gib"], f["load_end_avail_gib"]) == (138.61, 87.36)
    assert [(x["flag"], x["value"]) for x in gpu("h200-16.patched")["remedies"]] == [("mem-fraction-static", "0.863")]


def test_h200_16_figures_equal_the_gpus(tree):
    """The whole H200 with 16 requests (no blocker; SGLang's own --mem-fraction-static for the
    card): the harness gives the GPU's 277,916 tokens / 16 requests / 16 slots on both trees."""
    started_with_the_gpus_figures(tree, "h200-16", "h200-16")


def test_h200_16_patched_ledger_equals_the_gpus_ledger(recorded_patched):
    """Every figure of the ledger the patched tree wrote on the GPU (free bytes, headroom,
    budget, activation reserve, reservations, remedy) comes out of the harness unchanged,
    given the scenario's exact free bytes, weights bytes and flags (--disable-cuda-graph
    included: with graphs the activation reserve counts 2 x cuda_graph_max_bs MiB more,
    and the warning's remedy would be 0.859, not the GPU's 0.863)."""
    import json
    real = json.loads((DATA / "h200-16.patched.ledger.json").read_text())
    r = harness(recorded_patched, "h200-16")
    assert r.ledger["figures"] == real["figures"]
    assert r.ledger["reservations"] == real["reservations"]
    assert [(x["flag"], x["value"]) for x in r.ledger["remedies"]] == [
        (x["flag"], x["value"]) for x in real["remedies"]] == [("--mem-fraction-static", 0.863)]


# The pin, v0.5.17, on the H200 (2026-12-03): the harness with the exact free bytes of that day's
# ledger (scenarios h200-v0517-*.toml) against the logs: the pristine tree's runs in cases/, the
# patched tree's in cases-conv-windows/ (taken with the stack as it is since
# memory-reserve-the-speculative-conv-windows.patch; cases/ holds the stack's runs before it).
PIN_DATA = Path(__file__).parents[1] / "data" / "gpu_results" / "2026-12-03"
PIN_RELEASE = "0.5.17"


def pin_gpu(case, run):
    import json
    part = "cases" if run == "pristine" else "cases-conv-windows"
    cases = {c["name"]: c for c in json.loads((PIN_DATA / part / "e2e.json").read_text())["cases"]}
    return cases[case]["runs"][run]["log_figures"]


@pytest.fixture(scope="module")
def pin_patched(patched_tree_of):
    return patched_tree_of(PIN_RELEASE)


def _figures(r):
    return r.figures["max_total_num_tokens"], r.figures["max_running_requests"], r.figures["max_mamba_cache_size"]


def _logged(f):
    return f["max_total_num_tokens"], f["max_running_requests"], f["mamba_cache"][0]["max_mamba_cache_size"]


def test_v0_5_17_records_say_what_docs_gpu_md_says():
    for case in ("zero-requests-dflash", "dflash-smoke-raised"):
        for run in ("pristine", "patched", "patched+remedy"):
            assert pin_gpu(case, run)["load_begin_avail_gib"] == 92.06
    assert _logged(pin_gpu("dflash-smoke-raised", "patched+remedy")) == (48567, 2, 24)
    assert _logged(pin_gpu("zero-requests-dflash", "patched+remedy")) == (398116, 4, 20)


def test_the_pin_fails_both_cases_as_on_the_gpu(release_tree):
    z = harness(release_tree(PIN_RELEASE), "h200-v0517-zero-requests-dflash")
    (err,) = pin_gpu("zero-requests-dflash", "pristine")["errors"]
    assert z.outcome is Outcome.REFUSED and z.error["type"] == "RuntimeError"
    assert err == "RuntimeError: " + z.error["message"]       # every figure of the message: -1 slots, 4.69 GB
    s = harness(release_tree(PIN_RELEASE), "h200-v0517-dflash-smoke-raised")
    (err,) = pin_gpu("dflash-smoke-raised", "pristine")["errors"]
    assert s.outcome is Outcome.REFUSED and err == "ValueError: " + s.error["message"]   # "above 0.597"


def _refused_like_the_gpu(tree, case, scenario):
    r = run_scenario(source_root(tree), load_scenario(scenario), verify_remedy=True)
    f = pin_gpu(case, "patched")
    assert r.outcome is Outcome.REFUSED
    stated = [(x.parsed.flag, str(x.parsed.value)) for x in r.remedies]
    logged = list(dict.fromkeys(("--" + x["flag"].lstrip("-"), x["value"]) for x in f["remedies"]))
    assert stated == logged
    return r


def test_dflash_smoke_raised_on_the_patched_pin_refuses_and_its_remedy_starts_as_on_the_gpu(pin_patched):
    r = _refused_like_the_gpu(pin_patched, "dflash-smoke-raised", "h200-v0517-dflash-smoke-raised")
    assert [(x.parsed.flag, str(x.parsed.value)) for x in r.remedies] == [
        ("--max-running-requests", "2"), ("--mem-fraction-static", "0.787")]
    first = r.remedies[0].rerun           # the GPU's re-run took the first remedy
    assert _figures(first) == _logged(pin_gpu("dflash-smoke-raised", "patched+remedy"))


def test_zero_requests_on_the_patched_pin_refuses_and_its_remedy_starts_as_on_the_gpu(pin_patched):
    r = _refused_like_the_gpu(pin_patched, "zero-requests-dflash", "h200-v0517-zero-requests-dflash")
    assert _figures(r.remedies[0].rerun) == _logged(pin_gpu("zero-requests-dflash", "patched+remedy"))
