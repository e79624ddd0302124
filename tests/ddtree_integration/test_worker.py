"""DDTREE decode steps through the tree's own worker code, up to the CUDA kernels.

Patch dflash-draft-block: DFlashWorker._run_draft_block (DFlash's draft forward,
split out of _prepare_for_speculative_decoding so DDTREE can reuse it).
Overlay ddtree_worker.py: draft -> tree -> EagleVerifyInput -> verify -> commit.

The worker, EagleVerifyInput (allocation, verify bookkeeping, eviction),
EAGLE's _mamba_verify_update and DFlash's draft-KV append are the tree's code;
the GPU stack is stood in (standins.py) and the verify kernel runs as its CPU
transliteration after the compiled argument checks (kernel_reference.py).

The pin shows dflash-draft-block's absence (no ``_run_draft_block``); the series
without that patch (fixture ``stack_without``) shows why DDTREE needs it: its
worker's draft step calls the method and fails there.
"""

import re

import pytest
import torch

from tests.ddtree_integration import kernel_reference as kref
from tests.ddtree_integration import standins as st
from tests.ddtree_integration.run import probe

PROMPTS = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11, 12], [3, 1, 4]]
# (block, budget, steps, truth ranks per depth): narrow and wide trees, deep and shallow accepts
CONFIGS = [
    dict(block=5, budget=6, steps=3, truth_rank=(0, 1, 0, 2), seed=0),
    dict(block=4, budget=12, steps=3, truth_rank=(1, 0, 2), seed=1),
    dict(block=6, budget=5, steps=2, truth_rank=(0, 0, 0, 0, 0), seed=2),
]


def _tensor(d):
    dt = getattr(torch, d["dtype"].split(".")[-1])
    return torch.tensor(d["values"], dtype=dt).reshape(d["shape"])


def _mask_blocks(mask, seq_before, N):
    """Per request, the [N, prefix + N] bool block of the flat FULL_MASK."""
    out, off = [], 0
    for P in seq_before:
        out.append(mask[off: off + N * (P + N)].view(N, P + N))
        off += N * (P + N)
    assert off == mask.numel(), "custom mask size != sum(prefix) * N + bs * N^2"
    return out


def check_decode(tree, configs=CONFIGS):
    r = probe(tree, "ddtree_decode_configs", prompts=PROMPTS, configs=configs)
    assert r["ok"], f"DDTREE decode probe on {tree} failed: {r.get('type')}: {r.get('message')}"
    differ = 0
    for cfg, res in zip(configs, r["value"]):
        assert res["ok"], f"DDTREE decode step on {tree} failed: {res.get('type')}: {res.get('message')}"
        differ += _check_steps(res["value"]["steps"], cfg)
    return differ


def _check_steps(steps, cfg):
    block, budget = cfg["block"], cfg["budget"]
    N, L, bs = budget + 1, block - 1, len(PROMPTS)
    tree_paths_differ = 0
    for s in steps:
        vi = s["verify_input"]
        assert "EagleVerifyInput" in vi["mro"], "the verify input must be EAGLE's tree-verify input"
        dt, pos = _tensor(vi["draft_token"]), _tensor(vi["positions"])
        ri, nt, ns = (_tensor(vi[k]) for k in ("retrieve_index", "retrieve_next_token", "retrieve_next_sibling"))
        mask = _tensor(vi["custom_mask"])
        assert (dt.dtype, tuple(dt.shape)) == (torch.int64, (bs * N,))
        assert (pos.dtype, tuple(pos.shape)) == (torch.int64, (bs * N,))
        for t in (ri, nt, ns):
            assert (t.dtype, tuple(t.shape)) == (torch.int64, (bs, N))
        assert mask.dtype == torch.bool
        assert vi["draft_token_num"] == N and vi["spec_steps"] == L and vi["topk"] == 2
        assert vi["seq_lens_sum"] == sum(s["seq_before"])
        acc = _tensor(s["kernel"]["accept_index"])
        nacc = _tensor(s["kernel"]["accept_token_num"])
        predicts = _tensor(s["kernel"]["predicts"])
        assert acc.shape == (bs, L + 1), "accept width must be L + 1 (the deepest path)"
        conv_parents = kref.parents_like_causal_conv1d(nt, ns)
        blocks = _mask_blocks(mask, s["seq_before"], N)
        slots = torch.tensor(s["verify_slots"]).view(bs, N)
        r2t = torch.tensor(s["req_to_token"])
        freed_expected = set(s["verify_slots"])
        for b in range(bs):
            P = s["seq_before"][b]
            blk = blocks[b]
            assert bool(blk[:, :P].all()), "prefix columns must all be visible"
            tree_part = blk[:, P:]
            assert bool(tree_part.diagonal().all()), "every verify row sees itself (no all-False row)"
            depth = tree_part.sum(1) - 1
            assert torch.equal(pos.view(bs, N)[b], P + depth), "positions = prefix + depth"
            root_tok = (s["outputs_before"][b] or PROMPTS[b])[-1]
            assert int(dt.view(bs, N)[b, 0]) == root_tok, "the root is the bonus token"
            # the parent the tree conv / SSM kernels derive == the mask's nearest ancestor
            for k in range(1, N):
                anc = [j for j in range(k) if bool(tree_part[k, j])]
                if not anc:  # padding: isolated, unreachable
                    assert int(nt[b, k]) == -1 and int(ns[b, k]) == -1
                    assert k not in nt[b].tolist() and k not in ns[b].tolist()
                    continue
                assert int(conv_parents[b, k]) == max(anc), f"node {k}: conv parent != mask parent"
            # acceptance: a root-first path of tree edges
            m = int(nacc[b])
            path = [int(x) - b * N for x in acc[b, : m + 1]]
            assert path[0] == 0 and all(int(x) == -1 for x in acc[b, m + 1:])
            for a, c in zip(path, path[1:]):
                assert bool(tree_part[c, a]) and int(depth[c]) == int(depth[a]) + 1
            committed = [int(predicts[b * N + j]) for j in path]
            new = s["outputs_after"][b][len(s["outputs_before"][b]):]
            assert new == committed, "committed tokens = the kernel's predicts along the path"
            # SSM commit from the last accepted node (not the accept length)
            assert s["mamba_commit"][b] == path[-1]
            tree_paths_differ += int(path[-1] != m)
            # KV: the path's slots, in path order, become the request's next positions
            assert s["seq_after"][b] == P + m + 1
            assert r2t[b, P: P + m + 1].tolist() == [int(slots[b, j]) for j in path]
            freed_expected -= {int(slots[b, j]) for j in path}
            # drafter context: the target features of the path rows at positions P..P+m
            for i, j in enumerate(path):
                assert s["draft_kv"][str(int(slots[b, j]))] == [b * N + j, P + i]
            assert s["bonus_after"][b] == s["outputs_after"][b][-1]
        assert set(s["freed"]) == freed_expected and len(s["freed"]) == len(freed_expected)
        assert s["seq_lens_cpu_after"] == s["seq_after"]
        assert s["seq_lens_sum_after"] == sum(s["seq_after"])
        assert s["spec_info_after"] == "DFlashDraftInput"
    # greedy losslessness through the real verify: outputs = plain greedy decoding
    for b, prompt in enumerate(PROMPTS):
        out = steps[-1]["outputs_after"][b]
        assert out == st.greedy_reference(prompt, len(out)), f"request {b}: not plain greedy"
    return tree_paths_differ


def test_ddtree_decode_patched(patched_tree):
    differ = check_decode(patched_tree)
    # some steps accepted a sibling path: the last node's index differs from the accept length
    assert differ > 0


def test_ddtree_sampling_decode_patched(patched_tree):
    """Temperature 1: EagleVerifyInput.verify's sampling branch feeds
    tree_speculative_sampling_target_only (argument checks as compiled) with no
    draft probabilities (all zero: target-only, lossless) and thresholds 1."""
    cfg = dict(CONFIGS[1], sampling=True)
    r = probe(patched_tree, "ddtree_decode_configs", prompts=PROMPTS, configs=[cfg])
    res = r["value"][0]
    assert res["ok"], res
    for s in res["value"]["steps"]:
        assert s["kernel"]["sampling"] and s["kernel"]["draft_probs_all_zero"]
        assert s["kernel"]["thresholds"] == [1.0, 1.0]
    _check_steps(res["value"]["steps"], cfg)


def test_tp_topk_merge_patched(patched_tree):
    """With tensor parallelism every rank builds the same tree: the ranks' top-K and
    log-sum-exp over their vocabulary shards (the last one short) merge into exactly
    the single-rank top-K log-probabilities over the whole vocabulary."""
    r = probe(patched_tree, "tp_topk_many", tps=[2, 3])
    assert r["ok"], r
    for v in r["value"]:
        assert v["ranks_identical"] and v["ids_equal"], v
        assert v["max_lp_diff"] < 1e-4, v
        assert v["shapes"] == [[2, 3, 9], "torch.int64", "torch.float32"]


def test_ddtree_decode_absent_on_pristine(pristine_tree):
    with pytest.raises(AssertionError, match=r"DDTREE decode step on .* failed: ModuleNotFoundError: sglang\.srt\.speculative\.ddtree_worker: "
                                             r"no .*/sglang/srt/speculative/ddtree_worker\.py in this tree"):
        check_decode(pristine_tree, CONFIGS[:1])


def _expected_chain(prompts, block, seed):
    """DFlash's chain from the same stand-in drafter: bonus, then the argmax per position."""
    reqs = [st.Req(p) for p in prompts]
    batch = st.Batch(reqs, torch.zeros((len(reqs), 8), dtype=torch.int64), st.Allocator())
    h = st.OracleDrafter([batch], block, [0, 1], seed).forward(None).logits_output.hidden_states
    h = h.view(len(reqs), block, -1)
    toks, poss = [], []
    for b, r in enumerate(reqs):
        P = len(r.tokens()) - 1
        toks += [r.tokens()[-1]] + h[b, 1:].argmax(-1).tolist()
        poss += list(range(P, P + block))
    return toks, poss


def check_draft_block_hook(tree):
    r = probe(tree, "dflash_chain_step", prompts=PROMPTS, block=5, seed=3)
    assert r["ok"], r
    v = r["value"]
    toks, poss = _expected_chain(PROMPTS, 5, 3)
    assert v["draft_token"]["values"] == toks and v["positions"]["values"] == poss, "DFlash's chain changed"
    assert v["has_run_draft_block"], f"DFlashWorker of {tree} has no _run_draft_block"


def test_draft_block_hook_patched(patched_tree):
    check_draft_block_hook(patched_tree)


def test_draft_block_hook_absent_on_pristine(pristine_tree):
    with pytest.raises(AssertionError, match="no _run_draft_block"):
        check_draft_block_hook(pristine_tree)


def test_ddtree_draft_fails_without_the_draft_block_patch(stack_without):
    """The series less dflash-draft-block.patch: DDTREE's first decode step stops
    where its worker calls DFlash's split-out draft forward."""
    r = probe(stack_without("dflash-draft-block.patch"), "ddtree_decode_configs", prompts=PROMPTS, configs=CONFIGS[:1])
    assert r["ok"], r
    res = r["value"][0]
    assert not res["ok"] and res["type"] == "AttributeError" and "'_run_draft_block'" in res["message"], res
    assert re.search(r'ddtree_worker\.py", line \d+, in _prepare_for_speculative_decoding\n.*self\._run_draft_block\(',
                     res["traceback"]), f"the failure must be the worker's call of _run_draft_block:\n{res['traceback']}"


def test_worker_init_builds_dflash_drafter_patched(patched_tree):
    """The drafter is built as DFlash's (its block in speculative_num_draft_tokens,
    topk 1: the draft runner's verify width, attention buffers and warm-up), and
    the target's arguments are restored (budget + 1, topk 2); arguments that did
    not go through DDTREE's server rules are refused."""
    r = probe(patched_tree, "worker_init", block=16, budget=63)
    assert r["ok"], r
    v = r["value"]
    assert v["seen"]["num_draft_tokens"] == 16 and v["seen"]["topk"] == 1
    assert v["after"] == [64, 2]
    assert v["worker"] == [16, 63, 64, 15]
    assert v["unfinished"] and "finish_ddtree_server_args" in v["unfinished"]
