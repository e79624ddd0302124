"""The harness against reality: the start-ups recorded on the H200 on
2026-12-01 (tests/gpu/data/h200-2026-12-01, docs/results/gpu.md) re-run through
SGLang's real sizing code on a CPU, with the exact free bytes the patched
tree's ledger recorded there (scenarios h200-*.toml).  Every figure the
GPU's logs state must come out exactly: KV tokens, running requests and
Mamba slots, on the pin and on the patched tree; the pin's failure and the
patched tree's refusal, with the same remedies."""
from pathlib import Path

import pytest

from tests.gpu.e2e_script import e2e_log

from sgl_overlay.harness import Outcome, load_scenario, run_scenario, source_root
from sgl_overlay.release_trees import release_tree

DATA = Path(__file__).parent / "data" / "h200-2026-12-01"
RELEASE = "0.5.12.post1"        # the release these start-ups ran on (the pin of 2026-12-01)


def gpu(name):
    return e2e_log.parse_log((DATA / f"{name}.log").read_text())


def harness(tree, scenario):
    return run_scenario(source_root(tree), load_scenario(scenario), verify_remedy=False)


@pytest.fixture(scope="module", params=["pristine", "patched"])
def tree(request, patched_tree_of):
    if request.param == "pristine":
        return release_tree(RELEASE), "pristine"
    return patched_tree_of(RELEASE), "patched"


@pytest.fixture(scope="module")
def patched_tree(patched_tree_of):
    return patched_tree_of(RELEASE)


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


def test_zero_requests_on_the_pin_is_the_gpus_failure():
    f = gpu("zero-requests-dflash.pristine")
    r = harness(release_tree(RELEASE), "h200-zero-requests-dflash")
    got = r.figures
    assert r.outcome is Outcome.BROKEN
    assert got["max_running_requests"] == 0        # the GPU: AssertionError: max_running_request is zero
    assert (got["max_total_num_tokens"], got["max_mamba_cache_size"]) == (
        f["kv_cache"][0]["tokens"], f["mamba_cache"][0]["max_mamba_cache_size"])


def test_zero_requests_on_the_patched_tree_refuses_with_the_gpus_remedies(patched_tree):
    f = gpu("zero-requests-dflash.patched")
    r = harness(patched_tree, "h200-zero-requests-dflash")
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


def test_h200_16_patched_ledger_equals_the_gpus_ledger(patched_tree):
    """Every figure of the ledger the patched tree wrote on the GPU (free bytes, headroom,
    budget, activation reserve, reservations, remedy) comes out of the harness unchanged,
    given the scenario's exact free bytes, weights bytes and flags (--disable-cuda-graph
    included: with graphs the activation reserve counts 2 x cuda_graph_max_bs MiB more,
    and the warning's remedy would be 0.859, not the GPU's 0.863)."""
    import json
    real = json.loads((DATA / "h200-16.patched.ledger.json").read_text())
    r = harness(patched_tree, "h200-16")
    assert r.ledger["figures"] == real["figures"]
    assert r.ledger["reservations"] == real["reservations"]
    assert [(x["flag"], x["value"]) for x in r.ledger["remedies"]] == [
        (x["flag"], x["value"]) for x in real["remedies"]] == [("--mem-fraction-static", 0.863)]
