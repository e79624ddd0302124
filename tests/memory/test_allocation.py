"""Reserved bytes (the patched tree's ledger) against the bytes the tree's own
pool constructors allocate, built on torch's meta device (harness allocation.py).

Documented rounding (docs/memory.md): Mamba state slots and speculative
intermediate states are reserved exactly; each KV pool allocates page_size
padding tokens beyond its reservation (MHATokenToKVPool holds size + page_size
tokens); the request-to-token table and index maps are not part of the budget.
"""

import pytest

from sgl_overlay.harness import load_scenario

from tests.memory import expected as E
from tests.memory.reports import SCENARIOS, report, runs


@pytest.mark.parametrize("name", SCENARIOS)
def test_reserved_equals_allocated(patched, name):
    sc = load_scenario(name)
    page = sc.server.get("page_size", 1)
    target, cell = E.kv_bytes_per_token(sc)
    measured = 0
    for applied, ledger, figures in runs(report(patched, name)):
        alloc = figures.get("allocation")
        if not alloc:
            continue
        res = ledger["reservations"]
        assert alloc["kv_cache_bytes"] - res["kv_cache"]["bytes"] == page * target, (applied, alloc, res)
        assert alloc["kv_pool_tokens"] == res["kv_cache"]["tokens"]
        if "mamba_states" in res:
            assert alloc["mamba_states_bytes"] == res["mamba_states"]["bytes"]
            assert alloc["mamba_slots"] == res["mamba_states"]["slots"]
        if "speculative_intermediate_states" in res:
            assert alloc["speculative_intermediate_states_bytes"] == res["speculative_intermediate_states"]["bytes"]
            assert alloc["speculative_intermediate_slots"] == res["speculative_intermediate_states"]["slots"]
        if "draft_kv" in res:
            assert alloc["draft_kv_bytes"] - res["draft_kv"]["bytes"] == page * (cell - target), (alloc, res)
        measured += 1
    assert measured, f"{name}: neither the run nor a remedy re-run built pools"


def test_pin_allocates_more_than_it_reserves(pristine):
    """The defect the mamba-spec-reservation patch removes, measured on the pin:
    in the known-good DFlash service the pools allocate one state slot and one
    intermediate slot (16 draft tokens) more than the sizing reserved."""
    rep = report(pristine, "dflash-smoke")
    f = rep["figures"]
    reserved = round((f["rest_before_mamba_gib"] - f["rest_after_mamba_gib"]) * E.GIB)
    a = f["allocation"]
    allocated = a["mamba_states_bytes"] + a["speculative_intermediate_states_bytes"]
    per_slot = E.mamba_bytes_per_slot(load_scenario("dflash-smoke"))
    assert allocated - reserved == pytest.approx((1 + 16) * per_slot, abs=2)
    assert (allocated - reserved) / E.GIB == pytest.approx(2.437, abs=0.001)
