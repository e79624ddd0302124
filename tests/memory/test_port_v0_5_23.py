"""The memory topic's port to SGLang v0.5.23 (patches/ports/v0.5.23/memory),
through the harness on a real tree.

Default tree: v0.5.23 with the whole port applied by ``git am``
(tests/port_tree.py).  ``--tree DIR``: any tree holding ``sglang/``
or ``python/sglang/``; the export runs each patch's ``Evidence:`` tests on
v0.5.23 with the earlier patches of the series (they must fail) and with the
patch too (they must pass).

Expectations are computed here from the scenario files (memory readings,
flags, model shapes) and the Mamba state size the tree's own config class
gives (``mamba_cache_per_req_bytes``, an input of the sizing), never copied
from the output of the code under test.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from sgl_overlay.harness import Case, Outcome, run_child, run_scenario, source_root
from sgl_overlay.harness import load_scenario as load_as_written

from tests import port_tree
from tests.memory import expected as E

SERIES_DIR = port_tree.PORTS / "memory"

GIB = 1 << 30
VLM_CACHE_BYTES = 100 << 20  # v0.5.23 environ.py SGLANG_VLM_CACHE_SIZE_MB: Qwen3.6 is multimodal


def load_scenario(name: str):
    """The scenario as a v0.5.23 user gives it: its parser refuses the pin's --mamba-scheduler-strategy
    and --cuda-graph-max-bs (harness/flag_renames.py), so the renamed flags are written instead."""
    return load_as_written(name).respelled()


@pytest.fixture(scope="session")
def port(request, tmp_path_factory) -> Path:
    given = request.config.getoption("--tree")
    if given:
        return source_root(given)
    return source_root(port_tree.build(SERIES_DIR, tmp_path_factory.mktemp("port-v0.5.23") / "sglang"))


@lru_cache(maxsize=None)
def report(tree: Path, name: str) -> dict:
    """The report's JSON form, as tools/regress.py --json prints it."""
    return run_scenario(tree, load_scenario(name)).to_json()


def budget_bytes(name: str) -> float:
    """post - the drafter's footprint - pre x (1 - mem_fraction_static) - the multimodal
    reservation, bytes.  v0.5.23 starts the drafter before it sizes the KV cache
    (sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855): its reading is the target's post-load one less the drafter's
    footprint, the scenario's [draft] weights_gib."""
    s = load_scenario(name)
    post = s.gpu["post_load_free_gib"] - (s.draft or {}).get("weights_gib", 0)
    gib = post - s.gpu["pre_load_free_gib"] * (1 - s.server["mem_fraction_static"])
    return gib * GIB - VLM_CACHE_BYTES


def kv_bytes_per_token(name: str) -> int:
    """bf16 K and V of the target's full-attention layers plus the DFlash drafter's layers."""
    s = load_scenario(name)
    text, draft = s.model["text_config"], s.draft
    full_layers = text["num_hidden_layers"] // text["full_attention_interval"]
    target = full_layers * text["num_key_value_heads"] * text["head_dim"] * 2 * 2
    return target + draft["num_hidden_layers"] * draft["num_key_value_heads"] * draft["head_dim"] * 2 * 2


def spec_per_slot(name: str) -> int:
    """One intermediate slot as v0.5.23's MambaPool allocates it (a linear draft chain: the conv
    windows deduplicated; tests/memory/expected.py)."""
    return E.spec_bytes_per_slot(load_scenario(name))


def machine_remedies(rep: dict) -> dict:
    """{flag key: value} of the remedies stated as 'remedy: --flag = value' lines."""
    return {r["parsed"]["key"]: r["parsed"]["value"] for r in (rep.get("remedies") or [])
            if r.get("parsed") and r["parsed"]["source"].startswith("remedy:")}


# -- budget-ledger.patch ------------------------------------------------------

def test_negative_rest_remedy_holds_a_request(port):
    """64 GiB held outside the model (8 GiB weights, 94 -> 21.7 GiB free): every
    stated remedy re-runs with a KV pool that holds one request at the context
    length, and the ledger names where the memory went.  v0.5.23 says "above
    0.770", whose re-run leaves 2,621 tokens for a 32,768-token context."""
    rep = report(port, "negative-rest-tp8")
    context = load_scenario("negative-rest-tp8").model["context_len"]
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    assert rep["remedies"], "refused without a remedy"
    for r in rep["remedies"]:
        assert r["works"], r["why"]
        assert r["rerun_figures"]["max_total_num_tokens"] >= context, (
            f"{r['applied']} leaves {r['rerun_figures']['max_total_num_tokens']} KV tokens, "
            f"less than one {context}-token request")
    assert "held outside the model" in rep["error"]["message"]


def test_zero_requests_refused_with_working_remedies(port):
    """extra_buffer's 5 Mamba slots per request, 3 slots in the ratio split:
    refused before anything is allocated, with machine-readable remedies that
    each re-run ok (v0.5.23: "state cache is too small ... Try: (1) reduce
    --max-running-requests", no value)."""
    rep = report(port, "zero-requests-dflash")
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    assert machine_remedies(rep), f"no 'remedy: --flag = value' line: {rep['error']['message'][-500:]}"
    assert all(r["works"] for r in rep["remedies"]), [r["why"] for r in rep["remedies"]]
    assert rep["passed"], rep["judgement"]


# -- fit-request-count.patch --------------------------------------------------

def test_default_48_lowered_to_fit(port):
    """--max-running-requests unset: DFLASH's rule sets 48, whose intermediate
    states (49 x 16 draft tokens of SSM state, 49 x 18 conv-window columns) exceed the card.
    The count is lowered to the largest n whose (n + 1) state slots and (n + 1)
    intermediate slots leave n x 16 + 7 KV tokens (radix cache off: n slots,
    1 per request)."""
    name = "dflash-default-48"
    rep = report(port, name)
    assert rep["outcome"] == Outcome.OK, rep["reason"]
    per_req = rep["figures"]["mamba_cache_per_req_bytes"]
    draft = load_scenario(name).draft["block_size"]
    cell = kv_bytes_per_token(name)

    def kv_tokens(n):
        return int(budget_bytes(name) - (n + 1) * (per_req + spec_per_slot(name))) // cell

    n = max(k for k in range(1, 49) if kv_tokens(k) >= k * draft + 7)
    assert rep["figures"]["max_running_requests_flag"] == 48
    assert rep["figures"]["max_running_requests"] == n
    assert abs(rep["figures"]["max_total_num_tokens"] - kv_tokens(n)) <= 1


def test_users_count_refused_with_slot_remedy(port):
    """The user's 4 requests with 24 explicit Mamba slots do not fit
    (dflash-smoke-tight): refused, not silently capped, with the largest
    count n that fits (25 state slots and (n + 1) intermediate slots leave
    n x 16 + 7 KV tokens), a --mem-fraction-static, and the slot count the 4
    requests need (4 x 1 slot with the radix cache off) where 4 requests fit
    with it; each re-run ok.  With the drafter's footprint counted (v0.5.23 starts
    the drafter before it sizes) 4 requests do not fit even with 4 slots, so no
    slot remedy is stated."""
    name = "dflash-smoke-tight"
    rep = report(port, name)
    server = load_scenario(name).server
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    remedies = machine_remedies(rep)
    per_req = rep["figures"]["mamba_cache_per_req_bytes"]
    draft, cell, want = load_scenario(name).draft["block_size"], kv_bytes_per_token(name), server["max_running_requests"]

    def fits(n, slots):
        return int(budget_bytes(name) - (slots + 1) * per_req - (n + 1) * spec_per_slot(name)) // cell >= n * draft + 7

    largest = max(k for k in range(1, want) if fits(k, server["max_mamba_cache_size"]))
    # the refusal names the count asked for and the largest that fits, not only the budget's deficit
    assert f"--max-running-requests {want} does not fit" in rep["error"]["message"], rep["error"]["message"][:300]
    assert f"at most {largest} fit" in rep["error"]["message"], rep["error"]["message"][:300]
    assert remedies.get("max_running_requests") == largest, remedies
    assert remedies.get("max_mamba_cache_size") == (want if fits(want, want) else None), remedies
    assert "mem_fraction_static" in remedies, remedies
    assert all(r["works"] for r in rep["remedies"]), [r["why"] for r in rep["remedies"]]


# -- over-budget-start.patch --------------------------------------------------

def test_dflash_smoke_starts(port):
    """The known-good service v0.5.14-v0.5.16 start (4 requests, 24 slots, with
    --mem-fraction-static raised by the drafter's share: dflash-smoke-raised)
    starts again: over budget by the two padding slots 59ef3b15cc
    reserves (one state slot + one intermediate slot), with a --mem-fraction-static remedy that re-runs
    within the budget (case fits) with at least the same figures."""
    name = "dflash-smoke-raised"
    rep = report(port, name)
    server = load_scenario(name).server
    assert rep["outcome"] == Outcome.OK, rep["reason"]
    f = rep["figures"]
    assert f["max_running_requests"] == server["max_running_requests"]
    assert f["max_mamba_cache_size"] == server["max_mamba_cache_size"]
    per_req = f["mamba_cache_per_req_bytes"]
    draft = load_scenario(name).draft["block_size"]
    cell = kv_bytes_per_token(name)
    # the reservation without the padding slots (as up to v0.5.16): 4 intermediate + 24 state slots
    expected_tokens = int(budget_bytes(name) - 4 * spec_per_slot(name) - 24 * per_req) // cell
    assert abs(f["max_total_num_tokens"] - expected_tokens) <= 1
    assert rep["case"] == Case.OVER_BUDGET
    over = rep["ledger"]["figures"]["over_budget_bytes"]
    assert abs(over - (per_req + spec_per_slot(name))) <= cell, over
    assert rep["remedies"] and all(r["works"] and r["rerun_case"] == Case.FITS for r in rep["remedies"]), \
        [r.get("why") for r in (rep.get("remedies") or [])]
    for r in rep["remedies"]:
        rf = r["rerun_figures"]
        assert rf["max_running_requests"] >= f["max_running_requests"]
        assert rf["max_total_num_tokens"] >= f["max_total_num_tokens"]
        assert rf["max_mamba_cache_size"] >= f["max_mamba_cache_size"]
    assert rep["passed"], rep["judgement"]


def test_tight_smoke_not_started_over_budget(port):
    """Do no harm starts only what fits: dflash-smoke-tight's reference pools
    (24 slots + 5 x 16 intermediate slots, 10,677 KV tokens: 15.91 GiB) leave
    16.66 GiB of 32.57 GiB, less than the 16.94 GiB activation reserve
    (512 + 1.5 x 8192 + 2 x 160 + 128 + 4096 MiB): case cannot_run."""
    rep = report(port, "dflash-smoke-tight")
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    assert rep["case"] == Case.CANNOT_RUN


def test_strict_budget_refuses_dflash_smoke(port, monkeypatch):
    """SGLANG_STRICT_MEMORY_BUDGET=1: what the budget does not hold is refused."""
    monkeypatch.setenv("SGLANG_STRICT_MEMORY_BUDGET", "1")
    child = run_child(port, load_scenario("dflash-smoke").to_request())
    assert not child["completed"]
    assert child["error"]["type"] == "MemoryBudgetError"
    assert "remedy: --mem-fraction-static = " in child["error"]["message"]


def test_dense_sizing_unchanged(port):
    """A dense model sizes exactly as on v0.5.23: same KV tokens and requests."""
    from sgl_overlay import release_trees

    pristine = source_root(release_trees.release_tree(port_tree.RELEASE))
    ours, theirs = report(port, "healthy-h200-8b"), report(pristine, "healthy-h200-8b")
    assert ours["outcome"] == theirs["outcome"] == Outcome.OK
    for key in ("max_total_num_tokens", "max_running_requests"):
        assert ours["figures"][key] == theirs["figures"][key]


# -- the upstream-style unit test the series adds ------------------------------

UPSTREAM_TEST = Path("test/registered/unit/model_executor/test_memory_budget.py")

def test_upstream_unit_test_passes(port):
    """test/registered/unit/model_executor/test_memory_budget.py (added by
    budget-ledger.patch, SGLang's test layout) passes on the tree."""
    port_tree.run_upstream_unit_test(port, UPSTREAM_TEST)


# -- memory-reserve-the-speculative-conv-windows.patch ----------------------------------

def test_conv_windows_reserved_as_allocated(port):
    """The known-good service at 0.8, where v0.5.23 starts it: the intermediate states the sizing
    reserves are what MambaPool allocates for them (computed here from the model's shapes and the
    pool's layout: an SSM state per draft token and the deduplicated conv windows, 5 slots), not
    D x mamba_cache_per_req a slot (v0.5.23 reserves 5 x 30 columns of 983,040 B more)."""
    import dataclasses
    sc = load_scenario("dflash-smoke-raised")
    rep = run_scenario(port, dataclasses.replace(sc, server=dict(sc.server, mem_fraction_static=0.8))).to_json()
    assert rep["outcome"] == Outcome.OK, rep["reason"]
    reserved = rep["ledger"]["reservations"]["speculative_intermediate_states"]
    per_req = rep["figures"]["mamba_cache_per_req_bytes"]
    assert reserved["draft_tokens"] == 16
    assert reserved["bytes"] == 5 * spec_per_slot("dflash-smoke-raised")
    assert 5 * 16 * per_req - reserved["bytes"] == 5 * 30 * 983040
