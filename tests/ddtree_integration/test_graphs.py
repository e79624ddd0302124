"""Patch ddtree-cuda-graph (DDTREE's target verify in CUDA graphs), and where a
DDTree verify's tree reaches the graphs' static buffers at replay.

Runs the tree's real CUDA-graph code on CPU (probes.graph_verify):
``DecodeCudaGraphRunner.get_spec_info`` (what the target's and the drafter's
graphs are captured with), then one DDTree verify step replayed at a captured
batch size through the real ``TritonAttnBackend._update_target_verify_buffers``
(the step's FULL_MASK copied into the backend's static verify mask, its
``mask_indptr`` from the device lengths) and the real
``MambaAttnBackendBase._replay_metadata`` of the hybrid models (the LCRS arrays
in its static buffers, the padded rows' Mamba slot -1; v0.5.17's graph runner
passes the padding, bs - the verify's requests, itself).

The pin has no DDTREE, so there the probe only shows its absence.  The patch's
reason is shown on the series without it (fixture ``stack_without``): DDTREE's
target is captured with DFlash's chain input (``DFlashVerifyInput``, topk 1: no
tree input), with no custom mask for a flashinfer target (DFlash's mask policy
skips it for flashinfer), so that graph is captured on the causal path and no
tree mask can reach it; a verify width other than budget + 1 is not refused.
The replay is not that patch's concern: the backends bring the tree to their
static buffers without it (asserted, so that a change there shows).
"""

import functools

import pytest

from tests.ddtree_integration.run import probe

SEQ_LENS = [9, 1, 5]  # a one-token prompt that is not the last request
BUDGET, BLOCK = 7, 4
GRAPH_PATCH = "ddtree-cuda-graph.patch"


@functools.cache
def _graph_probe(tree):
    """One probe run per tree and session: capture and replay tests read the same result."""
    return probe(tree, "graph_verify", budget=BUDGET, block=BLOCK, seq_lens=SEQ_LENS, capture_bs=[1, 4])


def graph_verify(tree):
    r = _graph_probe(tree)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    return r["value"]


def check_capture(v):
    N = BUDGET + 1
    for backend in ("TritonAttnBackend", "FlashInferAttnBackend"):
        c = v["capture"][backend]
        assert c["tree_input"] and c["type"] == "DDTreeVerifyInput", f"{backend}: captured with {c['type']}, not a tree input"
        assert c["static_mask"], f"{backend}: captured without the static custom mask: the tree mask cannot reach the graph"
        assert (c["draft_token_num"], c["topk"], c["capture_hidden_mode"]) == (N, 2, "FULL"), c
    d = v["capture"]["drafter"]
    assert (d["type"], d["draft_token_num"], d["static_mask"], d["capture_hidden_mode"]) == \
        ("DFlashVerifyInput", BLOCK, False, "NULL"), f"the drafter's graphs must stay DFlash's: {d}"
    err = v["capture"]["wrong_width"]
    assert err and f"captured with {BLOCK} tokens per request" in err and f"budget + 1 = {N}" in err \
        and "--disable-cuda-graph" in err, f"a verify width other than budget + 1 must be refused: {err!r}"


def check_replay(v):
    N = BUDGET + 1
    t = v["triton"]
    assert t["mode"] == "FULL_MASK" and t["static_mask"], "triton's replay reads its static FULL_MASK verify buffer"
    assert t["mask"], "the tree's FULL_MASK must reach triton's static mask"
    assert t["mask_indptr"], "mask_indptr = the device prefix lengths' FULL_MASK blocks"
    assert t["qo_indptr"] == [i * N for i in range(5)], t["qo_indptr"]
    h = v["hybrid"]
    assert h["next_token"] and h["next_sibling"] and h["metadata_static"], \
        "the tree's LCRS arrays must reach the hybrid backend's static buffers"
    assert h["state_indices"] == h["expected_state_indices"], (
        f"Mamba slots {h['state_indices']}, expected {h['expected_state_indices']} "
        "(real requests keep their slot, the padded row gets -1)")
    assert h["query_start_loc"] == [0, N, 2 * N, 3 * N, 3 * N], h["query_start_loc"]


def test_graph_capture_patched(patched_tree):
    check_capture(graph_verify(patched_tree))


def test_graph_replay_patched(patched_tree):
    check_replay(graph_verify(patched_tree))


def test_graphs_fail_on_pristine(pristine_tree):
    with pytest.raises(AssertionError, match="Unknown speculative algorithm name"):
        graph_verify(pristine_tree)


def test_graph_capture_fails_without_the_patch(stack_without):
    """The series less ddtree-cuda-graph.patch: DDTREE's target is captured with
    DFlash's chain input, and a flashinfer target gets no static mask."""
    v = graph_verify(stack_without(GRAPH_PATCH))
    with pytest.raises(AssertionError, match="TritonAttnBackend: captured with DFlashVerifyInput, not a tree input"):
        check_capture(v)
    N = BUDGET + 1
    for backend in ("TritonAttnBackend", "FlashInferAttnBackend"):
        c = v["capture"][backend]
        assert (c["type"], c["tree_input"], c["topk"], c["draft_token_num"]) == ("DFlashVerifyInput", False, 1, N), \
            f"{backend}: expected DFlash's chain input (topk 1) at the tree's width: {c}"
    assert not v["capture"]["FlashInferAttnBackend"]["static_mask"], \
        "flashinfer must be captured without a custom mask (its causal path) before the patch"
    assert v["capture"]["wrong_width"] is None, "before the patch no verify width is refused"


def test_graph_replay_is_not_the_graph_patch_reason(stack_without):
    """Without ddtree-cuda-graph.patch the backends' replay still brings the tree to
    their static buffers: the patch is about the capture only."""
    check_replay(graph_verify(stack_without(GRAPH_PATCH)))


def test_chain_verify_path_is_dflashs_patched(patched_tree):
    """--speculative-ddtree-chain-batch's verify path (ddtree_worker.build_chain_verify):
    a new target attention backend and graph runner built with DFLASH's verify
    values in both places the backends read them (the server arguments: the
    hybrid backend's tree mode; the runtime's spec bag: triton's verify width),
    then the tree's values back; the runner, marked verifies_chain, is captured
    with DFlash's chain input at the block's width (the patch's branch skips it)."""
    c = graph_verify(patched_tree)["chain_path"]
    dflash = {"spec_bag": [BLOCK, 1], "server_args": [BLOCK, 1]}
    assert {k: c["backend"][k] for k in dflash} == dflash and c["backend"]["init_new_workspace"], c["backend"]
    r = c["runner"]
    assert {k: r[k] for k in dflash} == dflash and (r["width"], r["verifies_chain"], r["own_backend"]) == (BLOCK, True, True), r
    assert (r["capture"]["type"], r["capture"]["draft_token_num"], r["capture"]["topk"]) == ("DFlashVerifyInput", BLOCK, 1), \
        f"the chain runner must be captured with DFlash's chain input: {r['capture']}"
    assert c["after"] == {"spec_bag": [BUDGET + 1, 2], "server_args": [BUDGET + 1, 2]}, "the tree's values must come back"
    assert c["init_new_workspace_after"] is False and c["runner_is_built"], c
    assert c["overrides"] == ["ddtree.chain_verify", "ddtree.tree_verify"], c["overrides"]
