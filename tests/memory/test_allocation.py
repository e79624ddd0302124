"""Reserved bytes (the patched tree's ledger) against the bytes the tree's own
pool constructors allocate, built on torch's meta device (harness allocation.py).

Case fits (docs/memory.md): every reservation's bytes equal what its pool
allocates (Mamba state slots and speculative intermediate states with their
padding slot; each KV pool's page_size padding cells, MHATokenToKVPool holding
size + page_size tokens); the request-to-token table and index maps are not part
of the budget.  Case over_budget: the reservations are the pin's pools as allocated.
Case cannot_run: no pools are built.
"""

import pytest

from sgl_overlay.harness import load_scenario

from tests.memory import expected as E
from tests.memory.reports import SCENARIOS, report, report_with, runs


POOLS = {  # ledger reservation -> the allocation's (bytes, count key, ledger count key)
    "mamba_states": ("mamba_states_bytes", "mamba_slots", "slots"),
    "speculative_intermediate_states": (
        "speculative_intermediate_states_bytes", "speculative_intermediate_slots", "slots"),
    "kv_cache": ("kv_cache_bytes", "kv_pool_tokens", "tokens"),
    "draft_kv": ("draft_kv_bytes", "kv_pool_tokens", "tokens"),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_reserved_equals_allocated(patched, name):
    """Per case (figures.case), for the run and every remedy re-run:
    fits: reserved = allocated, byte for byte (the KV pools' padding page included;
    until 2026-12-01 the ledger said tokens x cell, one page less than the pools
    allocate, seen on the H200 as one KV cell per pool, docs/results/gpu.md);
    over_budget: the reservations are the pin's pools as allocated (bytes equal),
    static_pool_bytes = those pools + the request table, over_budget_bytes =
    static pools (the table excluded) - budget; cannot_run: nothing allocated."""
    sc = load_scenario(name)
    page = sc.server.get("page_size", 1)
    target, cell = E.kv_bytes_per_token(sc)
    measured = 0
    for applied, ledger, figures in runs(report(patched, name)):
        alloc = figures.get("allocation")
        f, res = ledger["figures"], ledger["reservations"]
        case = f["case"]
        if case == "cannot_run":
            assert ledger["outcome"] == "refused" and not alloc, (applied, alloc)
            assert "kv_cache" not in res and "static_pool_bytes" not in f, (applied, res)
            if "pin_static_pool_bytes" in f:  # the pin would start; its pools are not free
                assert f["pin_static_pool_bytes"] + f["activation_reserve_bytes"] > f["post_load_free_bytes"]
            continue
        assert alloc, (name, applied, case, "no pools built")
        if case == "fits":
            assert alloc["kv_cache_bytes"] == res["kv_cache"]["bytes"], (applied, alloc, res)
            assert res["kv_cache"]["bytes"] == (res["kv_cache"]["tokens"] + page) * target
            assert alloc["kv_pool_tokens"] == res["kv_cache"]["tokens"]
            if "mamba_states" in res:
                assert alloc["mamba_states_bytes"] == res["mamba_states"]["bytes"]
                assert alloc["mamba_slots"] == res["mamba_states"]["slots"]
            if "speculative_intermediate_states" in res:
                assert alloc["speculative_intermediate_states_bytes"] == res["speculative_intermediate_states"]["bytes"]
                assert alloc["speculative_intermediate_slots"] == res["speculative_intermediate_states"]["slots"]
            if "draft_kv" in res:
                assert alloc["draft_kv_bytes"] == res["draft_kv"]["bytes"], (alloc, res)
        else:
            assert case == "over_budget", case
            allocated = {k: v for k, v in POOLS.items() if v[0] in alloc}
            assert set(res) == set(allocated), (applied, sorted(res), sorted(allocated))
            for k, (nbytes, count, key) in allocated.items():
                assert res[k]["bytes"] == alloc[nbytes], (applied, k, res[k], alloc[nbytes])
                assert res[k][key] == alloc[count], (applied, k, res[k], alloc[count])
            pools = sum(alloc[v[0]] for v in allocated.values())
            assert f["request_table_bytes"] == alloc["req_to_token_bytes"]
            assert f["static_pool_bytes"] == pools + alloc["req_to_token_bytes"]
            assert f["over_budget_bytes"] == pools - f["budget_bytes"] > 0
            assert f["free_after_static_pools_bytes"] == f["post_load_free_bytes"] - f["static_pool_bytes"]
            assert f["free_after_static_pools_bytes"] >= f["activation_reserve_bytes"]
        measured += 1
    assert measured, f"{name}: neither the run nor a remedy re-run built pools"


def _reserved_by_the_sizing(rep) -> int:
    """The Mamba bytes the sizing took out of its budget (the harness's figures
    around the tree's own _handle_max_mamba_cache)."""
    f = rep["figures"]
    return round((f["rest_before_mamba_gib"] - f["rest_after_mamba_gib"]) * E.GIB)


def test_v0_5_12_post1_allocated_more_than_it_reserved():
    """The defect mamba-spec-reservation.patch fixed on the old pin, measured on
    v0.5.12.post1: in the known-good DFlash service the pools allocate one
    state slot and one intermediate slot (16 draft tokens) more than the sizing
    reserved."""
    from sgl_overlay import release_trees
    from sgl_overlay.harness import source_root

    rep = report(source_root(release_trees.release_tree("0.5.12.post1")), "dflash-smoke")
    a = rep["figures"]["allocation"]
    allocated = a["mamba_states_bytes"] + a["speculative_intermediate_states_bytes"]
    per_slot = E.mamba_bytes_per_slot(load_scenario("dflash-smoke"))
    assert allocated - _reserved_by_the_sizing(rep) == pytest.approx((1 + 16) * per_slot, abs=2)


def test_mamba_spec_reservation_reserved_what_v0_5_12_post1_allocates(patched_tree_of):
    """The release matrix: the stack this repository kept for v0.5.12.post1 (tests/conftest.py
    EARLIER_PINS, with mamba-spec-reservation.patch) reserves, in the same service, exactly the Mamba
    state and intermediate bytes its pools allocate (the release alone: one state slot and one
    intermediate slot short, the test above)."""
    from sgl_overlay.harness import source_root

    rep = report(source_root(patched_tree_of("0.5.12.post1")), "dflash-smoke")
    a = rep["figures"]["allocation"]
    allocated = a["mamba_states_bytes"] + a["speculative_intermediate_states_bytes"]
    per_slot = E.mamba_bytes_per_slot(load_scenario("dflash-smoke"))
    assert (a["mamba_slots"], a["speculative_intermediate_slots"]) == (24 + 1, 4 + 1)   # with the padding slots
    assert allocated == (25 + 5 * 16) * per_slot
    assert _reserved_by_the_sizing(rep) == pytest.approx(allocated, abs=2)


def test_the_pin_reserves_a_linear_chains_conv_windows_dense(pristine, patched):
    """Why memory-reserve-the-speculative-conv-windows.patch: the pin (v0.5.17) reserves the pools'
    padding slots (59ef3b15cc, #32184: why mamba-spec-reservation.patch was dropped), but D x
    mamba_cache_per_req per intermediate slot, while its MambaPool keeps a linear draft chain's conv
    windows deduplicated, one shared window of D + K - 2 columns per layer and slot: the pin reserves
    more than its pools allocate by slots x (D(K-1) - (D+K-2)) columns x dim x 2 B x layers (the
    service at 0.8, where the pin starts it; seen on the H200 the same way, docs/results/gpu.md).
    The patched tree reserves what they allocate."""
    sc = load_scenario("dflash-smoke-raised")
    t = sc.model["text_config"]
    dim = t["linear_num_value_heads"] * t["linear_value_head_dim"] + 2 * t["linear_num_key_heads"] * t["linear_key_head_dim"]
    d, k, layers = E.draft_tokens(sc), t["linear_conv_kernel_dim"], 48
    for tree, over in ((pristine, True), (patched, False)):
        rep = report_with(tree, "dflash-smoke-raised", mem_fraction_static=0.8)
        assert rep["outcome"] == "ok", rep["reason"]
        a = rep["figures"]["allocation"]
        slots = a["speculative_intermediate_slots"]
        assert slots == 5                                   # 4 requests and the padding slot
        gap = _reserved_by_the_sizing(rep) - (a["mamba_states_bytes"] + a["speculative_intermediate_states_bytes"])
        want = slots * (d * (k - 1) - (d + k - 2)) * dim * 2 * layers if over else 0
        assert gap == pytest.approx(want, abs=2), (tree, gap, want)
