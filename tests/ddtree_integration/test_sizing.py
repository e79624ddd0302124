"""Memory sizing for DDTREE through the regression harness (tools/regress.py).

Scenario ddtree-h200-budget-31 runs the tree's real sizing code with the
tree's own DDTREE rules applied to the server arguments.  The speculative
intermediate SSM-state reservation is taken from the memory ledger the tree
writes (the memory-ledger patch: ``reservations.speculative_intermediate_states``)
or, for a tree without it, from the harness's figures
(rest_before_mamba - rest_after_mamba - max_mamba_cache_size * per_req), and
checked against the same scenario run as DFLASH (block 16): DDTREE must
reserve for budget + 1 = 32 draft tokens per slot, exactly 32/16 of DFLASH's
reservation, and at least per_req * running requests * 32 bytes.
"""

import dataclasses

import pytest

from sgl_overlay.harness import Outcome, Result
from sgl_overlay.harness import scenario as scenario_mod
from sgl_overlay.harness.run import run_scenario

GIB = 1 << 30
NAME = "ddtree-h200-budget-31"


def _reservation_bytes(report) -> float:
    ledger = report.ledger or {}
    spec = (ledger.get("reservations") or {}).get("speculative_intermediate_states")
    if spec is not None:
        assert spec["draft_tokens"] == report.figures["speculative_num_draft_tokens"], spec
        return float(spec["bytes"])
    f = report.figures
    slots = f["max_mamba_cache_size"] * f["mamba_cache_per_req_bytes"]
    return (f["rest_before_mamba_gib"] - f["rest_after_mamba_gib"]) * GIB - slots


def check_sizing(tree):
    sc = scenario_mod.load(NAME)
    budget = sc.server["speculative_ddtree_budget"]
    block = sc.server["speculative_dflash_block_size"]
    ddtree = run_scenario(tree, sc, verify_remedy=False)
    assert ddtree.outcome is Outcome.OK and ddtree.result is Result.PASS, (
        f"{NAME} on {tree}: {ddtree.outcome}: {ddtree.judgement}"
    )
    f = ddtree.figures
    assert f["speculative_num_draft_tokens"] == budget + 1, f
    dflash_sc = dataclasses.replace(sc, server={**sc.server, "speculative_algorithm": "DFLASH"})
    dflash = run_scenario(tree, dflash_sc, verify_remedy=False)
    assert dflash.outcome is Outcome.OK, dflash.judgement
    assert dflash.figures["speculative_num_draft_tokens"] == block
    r_tree, r_chain = _reservation_bytes(ddtree), _reservation_bytes(dflash)
    assert r_chain > 0
    # DDTREE's tree verify keeps a dense conv window per verify token (budget + 1 of mamba_cache_per_req
    # a slot); DFLASH's linear chain the deduplicated one (tests/memory/expected.spec_bytes_per_slot)
    from tests.memory.expected import spec_bytes_per_slot
    per_slot_tree = (budget + 1) * f["mamba_cache_per_req_bytes"]
    assert r_tree / r_chain == pytest.approx(per_slot_tree / spec_bytes_per_slot(dflash_sc), rel=1e-9), (
        r_tree, r_chain)
    floor = f["mamba_cache_per_req_bytes"] * sc.server["max_running_requests"] * (budget + 1)
    assert r_tree >= floor * (1 - 1e-9), (r_tree, floor)
    return {"reservation_gib": r_tree / GIB, "dflash_reservation_gib": r_chain / GIB, "figures": f}


def test_sizing_counts_budget_plus_one_patched(patched_tree):
    out = check_sizing(patched_tree)
    assert out["figures"]["max_running_requests"] == 4


def test_sizing_untestable_on_pristine(pristine_tree):
    with pytest.raises(AssertionError, match=r"untestable: .*this tree has no speculative algorithm 'DDTREE' "
                                             r"\(sglang/srt/speculative/spec_info\.py: "
                                             r"Unknown speculative algorithm name: DDTREE\)"):
        check_sizing(pristine_tree)
