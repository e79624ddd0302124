"""The patched tree's ledger equals the figures computed here from the scenario
files alone (expected.py), for every scenario and every remedy re-run."""

import pytest

from sgl_overlay.harness import load_scenario, run_child, source_root

from tests.memory import expected as E
from tests.memory.reports import SCENARIOS, child, report, runs

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


def _expected_case(sc, applied, mfs, pin):
    """The case docs/memory.md defines, from the scenario, the flags applied and
    the pin's own figures for them (the pristine tree's sizing): (case, budgeted
    plan or None, the pin's pools or None, whether they and the reserve fit in
    the memory free after the weights)."""
    if sc.model["kind"] == "dense":
        # dense models size as the pin does (never over budget); the ledger still
        # says when the pin's pools and the reserve would not be physically free
        if not E.pin_starts(sc, pin):
            return None, None, None, None
        pf = pin["figures"]
        pools = E.pin_pools(sc, pf["max_running_requests"], pf["max_total_num_tokens"], None, applied)
        server = dict(sc.server, **applied)
        physical = (E.static_pool_bytes(pools) + E.activation_reserve_bytes(server, sc.gpu.get("total_mib"))
                    <= int(sc.gpu["post_load_free_gib"] * GIB))
        return None, None, pools, physical
    p = E.largest_fitting(sc, mfs, applied)
    user_set = dict(sc.server, **applied).get("max_running_requests") is not None
    if p is not None and user_set and p.requests != E.requested(sc, applied):
        p = None  # a count the user set that does not fit is refused, not lowered
    if not E.pin_starts(sc, pin):
        return ("fits" if p else "cannot_run"), p, None, None
    pf = pin["figures"]
    n, t, s = pf["max_running_requests"], pf["max_total_num_tokens"], pf["max_mamba_cache_size"]
    pools = E.pin_pools(sc, n, t, s, applied)
    server = dict(sc.server, **applied)
    physical = E.static_pool_bytes(pools) + E.activation_reserve_bytes(server, sc.gpu.get("total_mib")) <= int(sc.gpu["post_load_free_gib"] * GIB)
    worse = p is None or p.requests < n or p.tokens < t or p.slots < s
    if physical and worse:
        return "over_budget", p, pools, physical
    return ("fits" if p else "cannot_run"), p, pools, physical


@pytest.mark.parametrize("name", SCENARIOS)
def test_ledger_equals_independent_computation(pristine, patched, name):
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
        # The pin's own sizing of the same flags (the pristine tree), the reference
        # for the three cases.
        pin = child(pristine, name, tuple(sorted(applied.items())))
        case, p, pools, physical = _expected_case(sc, applied, mfs, pin)
        if sc.model["kind"] == "dense":
            # dense models size as the pin does: never over budget
            case = "fits" if ledger["outcome"] == "ok" else "cannot_run"
        assert f["case"] == case, (name, applied, f["case"], case)
        if pools is not None and not physical:
            # the pin would start, but its pools and the reserve are not physically free
            assert f["pin_static_pool_bytes"] == E.static_pool_bytes(pools), (name, applied)
            assert f["activation_reserve_bytes"] == E.activation_reserve_bytes(dict(sc.server, **applied), sc.gpu.get("total_mib"))
            assert f["pin_static_pool_bytes"] + f["activation_reserve_bytes"] > f["post_load_free_bytes"]
        else:
            assert "pin_static_pool_bytes" not in f, (name, applied)
        if case == "fits":
            assert ledger["outcome"] == "ok"
            tokens = f["max_total_num_tokens"]
            assert (tokens, f["max_running_requests"]) == (
                figures["max_total_num_tokens"], figures["max_running_requests"])
            if sc.model["kind"] == "dense":
                assert tokens == f["budget_bytes"] // cell
                if E.pin_starts(sc, pin):  # identical to the pin's (test_dense.py)
                    pf = pin["figures"]
                    assert (tokens, f["max_running_requests"]) == (
                        pf["max_total_num_tokens"], pf["max_running_requests"])
            else:
                assert (tokens, f["max_running_requests"], f["max_mamba_cache_size"]) == (
                    p.tokens, p.requests, p.slots)
                assert res["mamba_states"] == {"bytes": p.mamba_bytes, "slots": p.slots + 1}
                assert res["speculative_intermediate_states"] == {
                    "bytes": p.spec_bytes, "slots": p.requests + 1, "draft_tokens": E.draft_tokens(sc)}
            page = sc.server.get("page_size", 1)   # each KV pool's padding cells (MHATokenToKVPool)
            assert res["kv_cache"] == {"bytes": (tokens + page) * target, "tokens": tokens}
            if cell != target:
                assert res["draft_kv"] == {"bytes": (tokens + page) * (cell - target), "tokens": tokens}
        elif case == "over_budget":
            # exactly the pin's figures; the reservations are its pools as allocated
            assert ledger["outcome"] == "ok"
            pf = pin["figures"]
            three = ("max_running_requests", "max_total_num_tokens", "max_mamba_cache_size")
            assert tuple(f[k] for k in three) == tuple(pf[k] for k in three) == tuple(figures[k] for k in three)
            table = pools["req_to_token"]
            assert res == {k: v for k, v in pools.items() if k != "req_to_token"}, (name, applied)
            assert f["request_table_bytes"] == table
            assert f["static_pool_bytes"] == E.static_pool_bytes(pools)
            assert f["over_budget_bytes"] == E.static_pool_bytes(pools) - table - E.budget_bytes(sc, mfs) > 0
            assert f["activation_reserve_bytes"] == E.activation_reserve_bytes(dict(sc.server, **applied), sc.gpu.get("total_mib"))
            assert f["free_after_static_pools_bytes"] == int(g["post_load_free_gib"] * GIB) - E.static_pool_bytes(pools)
            assert f["free_after_static_pools_bytes"] >= f["activation_reserve_bytes"]
            # one remedy: a larger --mem-fraction-static (its re-run is checked as a run here)
            got = [(r["flag"], r["value"]) for r in ledger["remedies"]]
            assert [fl for fl, _ in got] == ["--mem-fraction-static"] and got[0][1] > mfs, got
        else:
            assert ledger["outcome"] == "refused"
            assert "max_total_num_tokens" not in f and "kv_cache" not in res, (name, applied)
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
