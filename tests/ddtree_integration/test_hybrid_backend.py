"""Patch dflash-verify-tree-fields, and the hybrid linear-attention backend's tree path.

DDTREE's target runs with speculative_eagle_topk = 2, upstream's tree-verify
switch: MambaAttnBackendBase._forward_metadata (the tree's own code) then reads
retrieve_next_token / retrieve_next_sibling from every TARGET_VERIFY input and
allocates retrieve_parent_token, which the tree conv kernel fills from them and
the GDN / Mamba state updates start each node from (per-node intermediate SSM
states; test_worker.py checks the parents those kernels derive from DDTree's arrays).

The model runner's warm-up builds a DFlashVerifyInput for DFlash-drafted
algorithms (v0.5.17: spec_info.create_dummy_verify_input, called by base_runner's
dummy run; probed here through that function); without the patch it has no
retrieve_* fields and the tree path raises AttributeError at start-up.
The pin's DFlashVerifyInput already shows it (its tree path is upstream's); on the
series without the patch (fixture ``stack_without``) the warm-up is the only
failure: DDTree's own verify input goes through.
"""

import pytest

from tests.ddtree_integration.run import probe


PATCH = "dflash-verify-tree-fields.patch"
WARMUP_FAILURE = ("warm-up verify input breaks the tree path: "
                  "AttributeError: 'DFlashVerifyInput' object has no attribute 'retrieve_next_token'")


def hybrid_metadata(tree):
    r = probe(tree, "hybrid_verify_metadata", bs=2, budget=7, block=4)
    assert r["ok"], r
    assert r["value"]["topk"] == 2
    assert r["value"]["warmup_type"] == "DFlashVerifyInput"
    return r["value"]


def check_warmup(v):
    w = v["warmup"]
    assert w["ok"], f"warm-up verify input breaks the tree path: {w.get('type')}: {w.get('message')}"
    assert w["value"]["query_start_loc"] == [0, 8, 16]
    assert w["value"]["retrieve_parent_token"] is None, "a warm-up has no tree: no parent tensor"


def check_ddtree_input(v):
    d = v["ddtree"]
    assert d["ok"], f"DDTree verify input: {d.get('type')}: {d.get('message')}"
    md = d["value"]
    assert md["query_start_loc"] == [0, 8, 16], "N = budget + 1 tokens per request"
    assert md["same_arrays"], "the backend must pass DDTree's LCRS arrays to its kernels"
    assert md["retrieve_parent_token"] == {"dtype": "torch.int64", "shape": [2, 8]}


def check_hybrid_tree_path(tree):
    v = hybrid_metadata(tree)
    check_warmup(v)
    check_ddtree_input(v)


def test_hybrid_tree_path_patched(patched_tree):
    check_hybrid_tree_path(patched_tree)


def test_hybrid_tree_path_fails_on_pristine(pristine_tree):
    with pytest.raises(AssertionError, match=WARMUP_FAILURE):
        check_hybrid_tree_path(pristine_tree)


def test_only_the_warmup_fails_without_the_patch(stack_without):
    v = hybrid_metadata(stack_without(PATCH))
    with pytest.raises(AssertionError, match=WARMUP_FAILURE):
        check_warmup(v)
    check_ddtree_input(v)
