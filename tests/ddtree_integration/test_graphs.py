"""Patches ddtree-cuda-graph (DDTREE's target verify in CUDA graphs) and
hybrid-verify-graph-padding (a verify's padding at replay).

Runs the tree's real CUDA-graph code on CPU (probes.graph_verify):
``CudaGraphRunner.get_spec_info`` (what the target's graphs are captured with),
the real ``HybridLinearAttnBackend`` (real ``TritonAttnBackend`` + real
``MambaAttnBackendBase``) capture metadata, and ``CudaGraphRunner.replay_prepare``
of one DDTree verify step padded to a captured batch size, with the static buffers
``DecodeInputBuffers.create`` allocates.

The pin has no DDTREE, so there the probe only shows its absence.  Each patch's
reason is shown on the series without that one patch (fixture ``stack_without``):
- without ddtree-cuda-graph.patch, the capture fails: DDTREE's target is
  captured with DFlash's chain input (``DFlashVerifyInput``, topk 1: no tree
  input), with no custom mask for a flashinfer target (DFlash's mask policy skips
  it for flashinfer), so that graph is captured on the causal path and no tree
  mask can reach it; a verify width other than budget + 1 is not refused.  The
  replay is not that patch's concern: the tree's tokens, mask and LCRS arrays
  reach the static buffers without it (asserted, so that a change there shows);
- without hybrid-verify-graph-padding.patch, the replay fails: the one-token
  prompt at its first verify (sequence length 1, the graph runner's fill value)
  is counted as padding, and the batch's last real request gets Mamba slot -1
  and an empty query range for the step.
"""

import functools

import pytest

from tests.ddtree_integration.run import probe

SEQ_LENS = [9, 1, 5]  # the one-token prompt is not the last request
BUDGET, BLOCK = 7, 4


GRAPH_PATCH = "ddtree-cuda-graph.patch"
PADDING_PATCH = "hybrid-verify-graph-padding.patch"


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
    assert v["capture_metadata"] == {"triton_static_mask": True, "lcrs_static": True}, v["capture_metadata"]
    err = v["capture"]["wrong_width"]
    assert err and f"captured with {BLOCK} tokens per request" in err and f"budget + 1 = {N}" in err \
        and "--disable-cuda-graph" in err, f"a verify width other than budget + 1 must be refused: {err!r}"


def check_replay(v):
    N = BUDGET + 1
    r = v["replay"]
    assert (r["raw_bs"], r["bs"], r["num_tokens_per_bs"]) == (3, 4, N), r
    assert r["input_ids"] and r["positions"], "the tree's tokens and depth positions must reach the static buffers"
    assert r["mask_len"] == r["mask_expected_len"] and r["mask"], "the tree's FULL_MASK must reach triton's static mask"
    assert r["mask_indptr"], r
    assert r["qo_indptr"] == [i * N for i in range(5)], r["qo_indptr"]
    assert r["next_token"] and r["next_sibling"] and r["metadata_static"], \
        "the tree's LCRS arrays must reach the hybrid backend's static buffers"
    assert r["state_indices"] == r["expected_state_indices"], (
        f"Mamba slots {r['state_indices']}, expected {r['expected_state_indices']} "
        "(real requests keep their slot, the padded row gets -1)")
    assert r["query_start_loc"] == [0, N, 2 * N, 3 * N, 3 * N], r["query_start_loc"]


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
    # DFlash's mask policy hands triton the static mask even with the chain input:
    # for triton only the input's kind and topk are wrong
    assert v["capture"]["TritonAttnBackend"]["static_mask"], v["capture"]["TritonAttnBackend"]
    assert v["capture"]["wrong_width"] is None, "before the patch no verify width is refused"


def test_graph_replay_is_not_the_graph_patch_reason(stack_without):
    """Without ddtree-cuda-graph.patch (hybrid-verify-graph-padding.patch applied),
    replay_prepare still brings the tree's arrays to the static buffers and keeps
    every real request's Mamba slot: the patch is about the capture only."""
    check_replay(graph_verify(stack_without(GRAPH_PATCH)))


def test_graph_replay_fails_without_the_padding_patch(stack_without):
    """The series less hybrid-verify-graph-padding.patch: a DDTree verify padded
    from 3 requests to bs 4 loses its last real request (not the one-token one)."""
    v = graph_verify(stack_without(PADDING_PATCH))
    check_capture(v)
    with pytest.raises(AssertionError, match=r"Mamba slots \[4, 6, -1, -1\], expected \[4, 6, 7, -1\]"):
        check_replay(v)
    r, last = v["replay"], len(SEQ_LENS) - 1
    assert r["state_indices"][:last] == r["expected_state_indices"][:last], r
    assert r["state_indices"][last] == -1 != r["expected_state_indices"][last], r
    assert r["query_start_loc"][last + 1] == r["query_start_loc"][last], "the last real request's query range is empty"


# ---- patch hybrid-verify-graph-padding: a chain verify (DFLASH) with a one-token prefix
def chain_replay(tree):
    r = probe(tree, "chain_verify_replay", seq_lens=SEQ_LENS, bs=4, draft_tokens=BLOCK)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    return r["value"]


def test_chain_verify_replay_keeps_every_real_request_patched(patched_tree):
    v = chain_replay(patched_tree)
    assert v["fill"] == min(SEQ_LENS), "the test needs a real request whose length is the fill value"
    assert v["state_indices"] == v["expected_state_indices"], v
    assert v["query_start_loc"] == v["expected_query_start_loc"], v


def test_chain_verify_replay_drops_the_last_request_on_pristine(pristine_tree):
    """The pin counts the one-token request as padding: the batch's last real request
    (not the one-token one) loses its Mamba slot and its query tokens."""
    v = chain_replay(pristine_tree)
    last = len(SEQ_LENS) - 1
    assert v["state_indices"][:last] == v["expected_state_indices"][:last]
    assert v["state_indices"][last] == -1 != v["expected_state_indices"][last], v
    assert v["query_start_loc"][last + 1] == v["query_start_loc"][last], v
