"""The patched tree's ledger equals the figures computed here from the scenario
files alone (expected.py), for every scenario and every remedy re-run."""

import pytest

from sgl_overlay.harness import load_scenario, run_child, source_root

from tests.memory import expected as E
from tests.memory.reports import SCENARIOS, report, runs

GIB = E.GIB


def _radix_off(sc, applied):
    return dict(sc.server, **applied).get("disable_radix_cache", False)


def _expected_plan(sc, applied, mfs):
    """The budgeted sizing's figures (radix cache off): the user's count when it
    fits, the speculative default lowered to what fits, else None."""
    server = dict(sc.server, **applied)
    want = server.get("max_running_requests")
    b = E.budget_bytes(sc, mfs)
    slots = server.get("max_mamba_cache_size")
    if want is not None:
        p = E.reserve(sc, want, b, slots)
        return p if E.fits(sc, p) else None
    return E.largest_fitting(sc, mfs=mfs, slots=slots)


def _expected_remedies(sc):
    """The remedies docs/memory.md promises, in order, from the scenario alone
    (radix cache off; a refusal of the user's count)."""
    if sc.model["kind"] == "dense":
        return [("--mem-fraction-static", E.smallest_mfs_dense(sc))]
    want, slots = sc.server["max_running_requests"], sc.server.get("max_mamba_cache_size")
    out = []
    best = E.largest_fitting(sc, want - 1)
    if best:
        out.append(("--max-running-requests", best.requests))
    if slots is not None and slots != want and E.fits(sc, E.reserve(sc, want, E.budget_bytes(sc), want)):
        out.append(("--max-mamba-cache-size", want))
    for k in range(1, 1000):
        p = E.reserve(sc, want, E.budget_bytes(sc, k / 1000), slots)
        if E.fits(sc, p) and p.tokens >= sc.model["context_len"]:
            out.append(("--mem-fraction-static", k / 1000))
            break
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
        spec = bool(sc.server.get("speculative_algorithm"))
        # the load: free memory before and after the weights (the drafter's
        # footprint among what vanished beyond them, v0.5.14+), the headroom, the budget
        assert f["pre_load_free_bytes"] == int(g["pre_load_free_gib"] * GIB)
        assert f["post_load_free_bytes"] == E.post_load_free_bytes(sc)
        assert f["weights_bytes"] == int(g["weights_gib"] * GIB)
        assert f["outside_model_bytes"] == f["pre_load_free_bytes"] - f["post_load_free_bytes"] - f["weights_bytes"]
        assert f["outside_model_flagged"] == (f["outside_model_bytes"] > GIB)
        assert f["draft_model_loaded"] is spec
        assert f["headroom_bytes"] == int(g["pre_load_free_gib"] * (1 - mfs) * GIB)
        assert f["budget_bytes"] == E.budget_bytes(sc, mfs)
        target, cell = E.kv_bytes_per_token(sc)
        assert (f["target_cell_size_bytes"], f["cell_size_bytes"]) == (target, cell)
        page = sc.server.get("page_size", 1)
        hybrid = sc.model["kind"] != "dense"
        if hybrid:
            pr = E.mamba_bytes_per_slot(sc)
            assert f["mamba_cache_per_req_bytes"] == pr == figures["mamba_cache_per_req_bytes"]
        case = f["case"]
        if case in ("fits", "over_budget"):
            assert ledger["outcome"] == "ok"
            tokens, n = f["max_total_num_tokens"], f["max_running_requests"]
            assert (tokens, n) == (figures["max_total_num_tokens"], figures["max_running_requests"])
            # each KV pool holds page_size padding cells beyond its size (MHATokenToKVPool)
            assert res["kv_cache"] == {"bytes": (tokens + page) * target, "tokens": tokens}
            if cell != target:
                assert res["draft_kv"] == {"bytes": (tokens + page) * (cell - target), "tokens": tokens}
            if hybrid:
                slots, d = f["max_mamba_cache_size"], E.draft_tokens(sc)
                assert res["mamba_states"] == {"bytes": (slots + 1) * pr, "slots": slots + 1}
                if d:
                    assert res["speculative_intermediate_states"] == {
                        "bytes": (n + 1) * E.spec_bytes_per_slot(sc), "slots": n + 1, "draft_tokens": d}
        if case == "fits":
            if not hybrid:
                assert f["max_total_num_tokens"] == f["budget_bytes"] // cell
            elif _radix_off(sc, applied):
                p = _expected_plan(sc, applied, mfs)
                assert p is not None, (name, applied)
                assert (f["max_total_num_tokens"], f["max_running_requests"], f["max_mamba_cache_size"]) == (
                    p.tokens, p.requests, p.slots)
        elif case == "over_budget":
            # the reference: the reservation without the pools' padding slots (v0.5.16's)
            assert hybrid and _radix_off(sc, applied), (name, applied)
            server = dict(sc.server, **applied)
            ref = E.reserve(sc, server["max_running_requests"], E.budget_bytes(sc, mfs),
                            server.get("max_mamba_cache_size"), padding=False)
            assert (f["max_total_num_tokens"], f["max_running_requests"], f["max_mamba_cache_size"]) == (
                ref.tokens, ref.requests, ref.slots)
            table = f["request_table_bytes"]
            pools = sum(r["bytes"] for r in res.values())
            assert f["static_pool_bytes"] == pools + table
            assert f["over_budget_bytes"] == pools - f["budget_bytes"] > 0
            assert f["free_after_static_pools_bytes"] == f["post_load_free_bytes"] - f["static_pool_bytes"]
            chunk = E.resolved_flag({"figures": figures}, "chunked_prefill_size", sc.server.get("chunked_prefill_size"))
            assert f["activation_reserve_bytes"] == E.activation_reserve_bytes(
                sc.server.get("tp_size", 1), chunk, spec, sc.server.get("cuda_graph_max_bs"))
            assert f["free_after_static_pools_bytes"] >= f["activation_reserve_bytes"]
            # one remedy: a larger --mem-fraction-static (its re-run is checked as a run here)
            got = [(r["flag"], r["value"]) for r in ledger["remedies"]]
            assert [fl for fl, _ in got] == ["--mem-fraction-static"] and got[0][1] > mfs, got
        else:
            assert case == "cannot_run", case
            assert ledger["outcome"] == "refused"
            assert "max_total_num_tokens" not in f and "kv_cache" not in res, (name, applied)
            if applied == {} and (sc.model["kind"] == "dense" or _radix_off(sc, applied)):
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


def test_the_drafter_is_named_among_what_vanished(patched):
    """v0.5.14+ load the draft model before the target sizes: its weights are in
    the memory that vanished beyond the target's, and the refusal says so."""
    rep = report(patched, "dflash-smoke")
    assert rep["outcome"] == "refused", rep["reason"]
    assert "held outside the model (the draft model, loaded before this sizing; " in rep["error"]["message"]
