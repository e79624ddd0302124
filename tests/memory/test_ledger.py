"""The patched tree's ledger equals the figures computed here from the scenario
files alone (expected.py), for every scenario and every remedy re-run."""

import pytest

from sgl_overlay.harness import load_scenario, run_child, source_root

from tests.memory import expected as E
from tests.memory.reports import SCENARIOS, report, runs

GIB = E.GIB


def _expected_remedies(sc):
    """The remedies docs/memory.md promises, in order, from the scenario alone."""
    if sc.model["kind"] == "dense":
        return [("--mem-fraction-static", E.smallest_mfs(sc))]
    want = E.requested(sc)
    out = []
    best = E.largest_fitting(sc, overrides={"max_running_requests": want - 1})
    if best:
        out.append(("--max-running-requests", best.requests))
    slots = sc.server.get("max_mamba_cache_size")
    needed = want * E.mamba_ratio(sc)
    if slots is not None and slots != needed:
        p = E.reserve(sc, want, E.budget_bytes(sc), {"max_mamba_cache_size": needed})
        if E.fits(sc, p):
            out.append(("--max-mamba-cache-size", needed))
    out.append(("--mem-fraction-static", E.smallest_mfs(sc)))
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_ledger_equals_independent_computation(patched, name):
    sc = load_scenario(name)
    rep = report(patched, name)
    checked = 0
    for applied, ledger, figures in runs(rep):
        assert ledger, (name, applied, "no ledger")
        f, res = ledger["figures"], ledger["reservations"]
        g = sc.gpu
        mfs = applied.get("mem_fraction_static", sc.server["mem_fraction_static"])
        assert f["pre_load_free_bytes"] == int(g["pre_load_free_gib"] * GIB)
        assert f["post_load_free_bytes"] == int(g["post_load_free_gib"] * GIB)
        assert f["weights_bytes"] == int(g["weights_gib"] * GIB)
        assert f["outside_model_bytes"] == (
            int(g["pre_load_free_gib"] * GIB) - int(g["post_load_free_gib"] * GIB) - int(g["weights_gib"] * GIB))
        assert f["outside_model_flagged"] == (f["outside_model_bytes"] > GIB)
        assert f["headroom_bytes"] == int(g["pre_load_free_gib"] * (1 - mfs) * GIB)
        assert f["budget_bytes"] == E.budget_bytes(sc, mfs)
        target, cell = E.kv_bytes_per_token(sc)
        assert (f["target_cell_size_bytes"], f["cell_size_bytes"]) == (target, cell)
        if sc.model["kind"] != "dense":
            assert f["mamba_cache_per_req_bytes"] == E.mamba_bytes_per_slot(sc) == figures["mamba_cache_per_req_bytes"]
        if ledger["outcome"] == "ok":
            tokens = f["max_total_num_tokens"]
            assert (tokens, f["max_running_requests"]) == (
                figures["max_total_num_tokens"], figures["max_running_requests"])
            if sc.model["kind"] == "dense":
                assert tokens == f["budget_bytes"] // cell
            else:
                p = E.largest_fitting(sc, mfs, applied)
                assert (tokens, f["max_running_requests"], f["max_mamba_cache_size"]) == (
                    p.tokens, p.requests, p.slots)
                assert res["mamba_states"] == {"bytes": p.mamba_bytes, "slots": p.slots + 1}
                assert res["speculative_intermediate_states"] == {
                    "bytes": p.spec_bytes, "slots": p.requests + 1, "draft_tokens": E.draft_tokens(sc)}
            assert res["kv_cache"] == {"bytes": tokens * target, "tokens": tokens}
            if cell != target:
                assert res["draft_kv"] == {"bytes": tokens * (cell - target), "tokens": tokens}
        else:
            got = [(r["flag"], r["value"]) for r in ledger["remedies"]]
            assert got == _expected_remedies(sc), (name, got)
        checked += 1
    assert checked >= 1


def test_ledger_names_the_rank_with_least_free_memory(patched):
    sc = load_scenario("negative-rest-tp8")
    req = sc.to_request()
    req["gpu"] = dict(req["gpu"], post_load_free_gib_per_rank=[23.0, 22.4, 21.7, 23.0, 23.0, 23.0, 23.0, 23.0])
    out = run_child(source_root(patched), req)
    ledger = out["ledger"]
    assert ledger["figures"]["min_free_rank"] == 2
    assert ledger["figures"]["post_load_free_bytes"] == int(21.7 * GIB)
    assert "(rank 2 of 8)" in out["error"]["message"]
