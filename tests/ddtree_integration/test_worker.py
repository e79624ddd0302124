"""DDTREE spec-v2 decode steps through the tree's own worker code, up to the CUDA kernels.

Patch dflash-draft-block: DFlashWorkerV2._run_draft_block (DFlash's draft forward,
split out of forward_batch_generation so DDTREE can reuse it).
Overlay ddtree_worker.py: DDTreeWorker(DFlashWorkerV2): draft -> tree -> verify ->
device-side acceptance -> commit, with the overlap scheduler (the default) or without.

The workers, DFlash's draft forward and draft-KV append, the overlap scheduler's
KV reservation (DFlashDraftInputV2.prepare_for_decode), EAGLE's acceptance
(eagle_sample) and tree commit (commit_mamba_states_after_verify,
move_accept_tokens_to_target_kvcache) are the tree's code; the GPU stack is stood
in (standins.py) and the verify kernels run as their CPU transliteration after
the compiled argument checks (kernel_reference.py).  Every step runs under the
sync counter (syncs.py): the step's own code must read no device value on the host.

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
    """Per request, the [N, prefix + N] bool block of the flat FULL_MASK (blocks
    at the offsets the device computes; the buffer may be sized by a host bound)."""
    out, off = [], 0
    for P in seq_before:
        out.append(mask[off: off + N * (P + N)].view(N, P + N))
        off += N * (P + N)
    assert mask.numel() >= off, "custom mask smaller than sum(prefix) * N + bs * N^2"
    return out


def check_decode(tree, configs=CONFIGS, **common):
    r = probe(tree, "ddtree_decode_configs", prompts=PROMPTS, configs=[dict(c, **common) for c in configs])
    assert r["ok"], f"DDTREE decode probe on {tree} failed: {r.get('type')}: {r.get('message')}"
    differ = 0
    for cfg, res in zip(configs, r["value"]):
        assert res["ok"], f"DDTREE decode step on {tree} failed: {res.get('type')}: {res.get('message')}\n{res.get('traceback')}"
        differ += _check_steps(res["value"]["steps"], dict(cfg, **common))
    return differ


def _check_steps(steps, cfg):
    block, budget = cfg["block"], cfg["budget"]
    N, L, bs = budget + 1, block - 1, len(PROMPTS)
    hybrid = cfg.get("hybrid", True)
    tree_paths_differ = 0
    for s in steps:
        assert s["syncs"] == [], f"host synchronisations in the decode step: {s['syncs']}"
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
        assert vi["max_tree_depth"] == L + 1 and vi["capture_hidden_mode"].endswith("FULL")
        assert s["forward_batch_type"] == "ForwardBatch" and s["attn_init"] == "DDTreeVerifyInput", \
            "the verify forward is prepared as DFlash's (ForwardBatch.init_new, eager attention metadata)"
        acc = _tensor(s["kernel"]["accept_index"])
        nacc = _tensor(s["kernel"]["accept_token_num"])
        predicts = _tensor(s["kernel"]["predicts"])
        assert acc.shape == (bs, L + 1), "accept width must be L + 1 (the deepest path)"
        conv_parents = kref.parents_like_causal_conv1d(nt, ns)
        blocks = _mask_blocks(mask, s["seq_before"], N)
        slots = torch.tensor(s["verify_slots"]).view(bs, N)
        r2t_before, r2t = torch.tensor(s["req_to_token_before"]), torch.tensor(s["req_to_token"])
        kv = {int(k): tuple(v) for k, v in s["target_kv"].items()}
        assert s["applied"]["stride"] == block, "committed tokens per request: stride L + 1"
        assert s["published"] == [s["seq_after"]], "the new lengths are published to the overlap scheduler"
        assert s["events"].index("publish") < s["events"].index("draft_kv"), \
            "the lengths are published before the draft-KV append (the scheduler plans the next batch meanwhile)"
        commits = s["mamba_commit"]
        assert len(commits) == (1 if hybrid else 0), "one Mamba commit per step on a hybrid target, none on a dense one"
        for b in range(bs):
            P = s["seq_before"][b]
            # the overlap scheduler reserved the tree's verify slots: budget + 1 (and twice that ahead)
            assert s["reserved"][b] >= P + 2 * N, f"request {b}: reservation {s['reserved'][b]} < prefix + 2N"
            assert slots[b].tolist() == r2t_before[b, P: P + N].tolist(), "verify slots = req_to_token[prefix, prefix + N)"
            assert torch.equal(r2t[b], r2t_before[b]), "the step rewrites no req_to_token entry (over-allocation)"
            db = s["draft_block"]
            assert db["positions"][b * block: (b + 1) * block] == list(range(P, P + block))
            assert db["out_cache_loc"][b * block: (b + 1) * block] == r2t_before[b, P: P + block].tolist()
            blk = blocks[b]
            assert bool(blk[:, :P].all()), "prefix columns must all be visible"
            tree_part = blk[:, P:]
            assert bool(tree_part.diagonal().all()), "every verify row sees itself (no all-False row)"
            depth = tree_part.sum(1) - 1
            assert torch.equal(pos.view(bs, N)[b], P + depth), "positions = prefix + depth"
            root_tok = (s["outputs_before"][b] or PROMPTS[b])[-1]
            assert int(dt.view(bs, N)[b, 0]) == root_tok, "the root is the bonus token"
            assert db["input_ids"][b * block] == root_tok, "the draft block starts with the bonus token"
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
            assert s["applied"]["accept_lens"][b] == m + 1
            # SSM commit from the last accepted node (not the accept length)
            if hybrid:
                assert commits[0][b] == path[-1]
            tree_paths_differ += int(path[-1] != m)
            # KV: the path's KV moved to the front: position P + i holds node path[i]
            assert s["seq_after"][b] == P + m + 1
            for i, j in enumerate(path):
                assert kv[int(r2t[b, P + i])] == (int(dt.view(bs, N)[b, j]), P + i), \
                    f"request {b}: position {P + i} does not hold the accepted node {j}"
            # drafter context: the target features of the path rows at positions P..P+m
            for i, j in enumerate(path):
                assert s["draft_kv"][str(int(r2t[b, P + i]))] == [b * N + j, P + i]
            assert s["bonus_after"][b] == s["outputs_after"][b][-1]
        assert s["spec_info_after"] == "DFlashDraftInputV2"
    # greedy losslessness through the real verify: outputs = plain greedy decoding
    for b, prompt in enumerate(PROMPTS):
        out = steps[-1]["outputs_after"][b]
        assert out == st.greedy_reference(prompt, len(out)), f"request {b}: not plain greedy"
    return tree_paths_differ


def test_ddtree_decode_overlap_patched(patched_tree):
    """With the overlap scheduler (SGLang's default): no host mirror of the sequence
    lengths; the mask is sized by the reservation's bound."""
    differ = check_decode(patched_tree, overlap=True)
    # some steps accepted a sibling path: the last node's index differs from the accept length
    assert differ > 0


def test_ddtree_decode_without_overlap_patched(patched_tree):
    check_decode(patched_tree, CONFIGS[:2], overlap=False)


def test_ddtree_decode_with_the_verify_kernel_patched(patched_tree, monkeypatch):
    """The verify input from the one kernel (ddtree_triton._verify_kernel, Triton's interpreter on
    this CPU), as a CUDA worker whose start-up check passed builds it: the same checks, no host
    synchronisation in the step, plain greedy output, with and without the overlap scheduler."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")     # the probe's own interpreter (run_child inherits it)
    check_decode(patched_tree, CONFIGS[:2], fused_verify=True)
    check_decode(patched_tree, CONFIGS[2:], fused_verify=True, overlap=False)


def test_ddtree_decode_dense_target_patched(patched_tree):
    """A dense target (no Mamba state): no state commit, the rest unchanged."""
    check_decode(patched_tree, CONFIGS[:1], hybrid=False)


def test_ddtree_sampling_decode_patched(patched_tree):
    """Temperature 1: eagle_sample's sampling branch feeds
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


# ----------------------------------------------------------------- DFLASH, do no harm

def dflash_chain(tree, **kw):
    r = probe(tree, "dflash_chain_steps", prompts=PROMPTS, block=5, steps=2, seed=3, **kw)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    return r["value"]


def test_dflash_chain_is_the_pristine_chain(pristine_tree, patched_tree):
    """DFLASH's own spec-v2 decode on the patched tree equals pristine v0.5.17's
    step for step (chain, positions, verify slots, committed tokens), is plain
    greedy decoding of the toy target, and reads no device value on the host."""
    pristine, patched = dflash_chain(pristine_tree), dflash_chain(patched_tree)
    assert patched["steps"] == pristine["steps"], "DFLASH's decode changed on the patched tree"
    for s in patched["steps"]:
        assert s["syncs"] == [], s["syncs"]
    for b, prompt in enumerate(PROMPTS):
        out = patched["steps"][-1]["outputs_after"][b]
        assert len(out) > 2 and out == st.greedy_reference(prompt, len(out))
    assert patched["has_run_draft_block"] and not pristine["has_run_draft_block"]


def test_sync_counter_sees_a_host_read(patched_tree):
    """The counter is not blind: DFLASH with a compact draft window on the eager
    path (no GPU Triton) rebuilds the window from lengths read on the host
    (``_gather_req_to_token_segments``: ``lengths.max().item()``, a boolean-mask
    gather); upstream's own code, counted."""
    v = dflash_chain(patched_tree, compact_window=6)
    syncs = [why for s in v["steps"] for why, _ in s["syncs"]]
    assert "item() of a device tensor" in syncs, syncs
    assert any("boolean mask" in why for why in syncs), syncs
    assert all(where.startswith("sglang/srt/speculative/dflash_worker_v2.py:")
               for s in v["steps"] for _, where in s["syncs"]), v["steps"][0]["syncs"]


# ----------------------------------------------------------------- the draft-block hook

def test_ddtree_draft_fails_without_the_draft_block_patch(stack_without):
    """The series less dflash-draft-block.patch: DDTREE's first decode step stops
    where its worker calls DFlash's split-out draft forward."""
    r = probe(stack_without("dflash-draft-block.patch"), "ddtree_decode_configs", prompts=PROMPTS, configs=CONFIGS[:1])
    assert r["ok"], r
    res = r["value"][0]
    assert not res["ok"] and res["type"] == "AttributeError" and "'_run_draft_block'" in res["message"], res
    assert re.search(r'ddtree_worker\.py", line \d+, in forward_batch_generation\n.*self\._run_draft_block\(',
                     res["traceback"]), f"the failure must be the worker's call of _run_draft_block:\n{res['traceback']}"


def test_worker_init_builds_dflash_drafter_patched(patched_tree):
    """The drafter is built as DFlash's (its block in speculative_num_draft_tokens,
    topk 1: the draft runner's verify width, attention buffers and warm-up), through
    ServerArgs.override, and the target's arguments are restored (budget + 1,
    topk 2); arguments that did not go through DDTREE's rules are refused.

    In place of DFlash's in-graph greedy head, the tree's own draft head is what the
    draft graphs fold in (static buffers of the largest captured batch, N = budget + 1
    wide), with one TP rank and a floating-point LM head without added vocabulary;
    otherwise (and with DFlash's switch SGLANG_DFLASH_EAGER_DRAFT_SAMPLER) none: the
    tree is built eagerly."""
    r = probe(patched_tree, "worker_init", block=16, budget=63)
    assert r["ok"], r
    v = r["value"]
    assert v["seen"]["num_draft_tokens"] == 16 and v["seen"]["topk"] == 1
    assert v["after"] == [64, 2] and v["overrides"] == ["ddtree.drafter", "ddtree.target"]
    assert v["worker"] == [16, 63, 64, 15]
    assert v["unfinished"] and "finish_ddtree_server_args" in v["unfinished"]
    h = v["draft_head"]
    assert h["tp1"] and h["tp1"]["type"] == "DDTreeDraftHead", h
    assert (h["tp1"]["max_bs"], h["tp1"]["budget"], h["tp1"]["block"], h["tp1"]["num_org"]) == (24, 63, 16, 50)
    assert h["tp1"]["buffers"]["tokens"] == [[24, 64], "torch.int64"]
    assert h["tp1"]["buffers"]["ancestor"] == [[24, 64, 64], "torch.bool"]
    assert h["tp1"]["buffers"]["scores"] == [[24, 64], "torch.float64"]
    assert h["tp2"] is None and h["quantized"] is None and h["added_vocab"] is None and h["eager_switch"] is None, h


def test_ddtree_decode_with_the_draft_head_in_the_graph_patched(patched_tree):
    """The drafter's CUDA graphs with the tree's draft head folded in: each step
    replays the draft at a batch padded by two rows of noise, with no hidden states
    handed back, so the step's tree can come only from the head's static buffers.
    Every step feeds the verify and commits exactly what the eager steps do (the
    same top-K, tree, verify input, acceptance and KV), with no host read."""
    graphs = [dict(c, draft_graph_padding=2) for c in CONFIGS[:2]]
    r = probe(patched_tree, "ddtree_decode_configs", prompts=PROMPTS, configs=CONFIGS[:2] + graphs)
    eager, replayed = r["value"][:2], r["value"][2:]
    for cfg, e, g in zip(CONFIGS, eager, replayed):
        assert e["ok"] and g["ok"], (e if not e["ok"] else g)
        assert g["value"]["steps"] == e["value"]["steps"], f"{cfg}: the replayed draft head's steps differ"
        _check_steps(g["value"]["steps"], cfg)


# ----------------------------------------------------------------- --speculative-ddtree-chain-batch

def chain_steps(tree, schedule, **kw):
    r = probe(tree, "ddtree_chain_steps", prompts=PROMPTS, schedule=schedule, block=5, budget=6, seed=3, **kw)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    return r["value"]["steps"]


def _check_chain_step(s, block=5):
    """A chain step: DFlash's verify of the block on the chain path's backend."""
    assert (s["verify_on"], s["verify_input"], s["draft_token_num"]) == ("chain", "DFlashVerifyInput", block), s
    assert s["commits_on"] == {"tree": 0, "chain": 1}, "the Mamba commit runs on the chain path's backend"
    for b, P in enumerate(s["seq_before"]):
        assert s["verify_slots"][b * block: (b + 1) * block] == s["req_to_token"][b][P: P + block]
        assert s["positions"][b * block: (b + 1) * block] == list(range(P, P + block))


def test_chain_steps_are_dflash_steps_patched(patched_tree):
    """From the chain batch size up (here 1 and 3, the batch's 3 requests), a
    DDTREE step is DFLASH's own step: the same drafted chain, positions,
    acceptance and committed tokens as DFlashWorkerV2 on the same drafter and
    target, verified and committed on the chain path's backend, with no host read."""
    dflash = dflash_chain(patched_tree)["steps"]
    for schedule in ([1, 1], [3, 3]):
        steps = chain_steps(patched_tree, schedule)
        for s, d in zip(steps, dflash):
            _check_chain_step(s)
            assert s["syncs"] == [], s["syncs"]
            assert (s["draft_token"], s["positions"], s["seq_before"], s["applied"], s["outputs_after"]) == \
                (d["draft_token"], d["positions"], d["seq_before"], d["applied"], d["outputs_after"]), \
                f"chain batch {schedule[0]}: the chain step differs from DFLASH's"


def test_chain_and_tree_steps_alternate_losslessly_patched(patched_tree):
    """A batch below the chain batch size (4 > 3 requests) or no chain batch
    verifies the tree on the tree path's backend; the worker switches paths
    between steps either way and the output stays plain greedy decoding. With
    the draft head in the draft graph, a chain step reads the head's top-1 chain."""
    schedule = [None, 1, 4, 3, None, 2]
    for kw in ({}, {"draft_graph_padding": 2}, {"overlap": True}):
        steps = chain_steps(patched_tree, schedule, **kw)
        for s in steps:
            if s["chain_batch"] is not None and s["chain_batch"] <= len(PROMPTS):
                _check_chain_step(s)
            else:
                assert (s["verify_on"], s["verify_input"], s["draft_token_num"]) == ("tree", "DDTreeVerifyInput", 7), s
                assert s["commits_on"] == {"tree": 1, "chain": 0}
            assert s["syncs"] == [], s["syncs"]
        for b, prompt in enumerate(PROMPTS):
            out = steps[-1]["outputs_after"][b]
            assert len(out) > len(schedule) and out == st.greedy_reference(prompt, len(out)), (kw, b)
    eager, graphed = chain_steps(patched_tree, [1, 1]), chain_steps(patched_tree, [1, 1], draft_graph_padding=2)
    assert [s["draft_token"] for s in graphed] == [s["draft_token"] for s in eager], \
        "the draft head's top-1 chain must be DFlash's greedy chain"


def test_chain_graph_sizes_patched(patched_tree):
    """A captured draft-graph size is chain-only when every batch that replays it (above the next
    smaller captured size, up to it) is a chain step: that size + 1 >= the chain batch."""
    cases = [([1, 2, 4, 8, 16, 32], None), ([1, 2, 4, 8, 16, 32], 16), ([1, 2, 4, 8, 16, 32], 9),
             ([1, 4, 32], 4), ([32, 1, 4, 4], 2), ([1, 2, 4], 1), ([1, 2, 4], 5)]
    r = probe(patched_tree, "chain_graph_sizes", cases=cases)
    assert r["ok"], r
    assert r["value"] == [[], [32], [16, 32], [32], [4, 32], [1, 2, 4], []]


def test_a_chain_only_draft_graph_skips_the_tree_patched(patched_tree):
    """The batch (3 requests) replays the draft graph of 5 (two padded rows); with captured sizes
    1, 2, 5 that graph is chain-only for a chain batch up to 3: its head computes the greedy chain
    and writes no tree, and the steps are DFLASH's, as with the full head. For a chain batch of 4
    the same graph builds the tree (a batch of 3 replays it for a tree step)."""
    dflash = dflash_chain(patched_tree)["steps"]
    for cb in (1, 3):
        steps = chain_steps(patched_tree, [cb, cb], draft_graph_padding=2, capture_bs=[1, 2, 5])
        full = chain_steps(patched_tree, [cb, cb], draft_graph_padding=2)
        for s, f, d in zip(steps, full, dflash):
            _check_chain_step(s)
            assert s["syncs"] == []
            assert s["head_built_tree"] is False and f["head_built_tree"] is True
            assert (s["draft_token"], s["applied"], s["outputs_after"]) == \
                (f["draft_token"], f["applied"], f["outputs_after"]) == \
                (d["draft_token"], d["applied"], d["outputs_after"])
    for s in chain_steps(patched_tree, [4, 4], draft_graph_padding=2, capture_bs=[1, 2, 5]):
        assert s["verify_input"] == "DDTreeVerifyInput" and s["head_built_tree"] is True
    out = s["outputs_after"]
    for b, prompt in enumerate(PROMPTS):
        assert out[b] == st.greedy_reference(prompt, len(out[b]))


def test_adaptive_steps_take_the_kind_measured_faster_patched(patched_tree):
    """--speculative-ddtree-adaptive through the worker's real decode steps: the tree's run first,
    then the chain's (runs of 2 steps), then the kind whose measured tokens a second are higher.
    Each recorded sample is a step of its kind timed with its own kind's seconds (a run's first
    step is not measured) and carries the tokens that step committed (its accept lengths, as the
    output processor applied them); tree and chain steps verify and commit on their own paths, with
    no host read, and the output stays plain greedy decoding."""
    seconds = {"tree": 3.0, "chain": 1.0}
    steps = chain_steps(patched_tree, [None] * 10,
                        adaptive=dict(seconds=seconds, run_steps=2, min_samples=1, explore_every=100))
    kinds = ["chain" if s["verify_on"] == "chain" else "tree" for s in steps]
    assert kinds[:4] == ["tree", "tree", "chain", "chain"], kinds
    for s, kind in zip(steps, kinds):
        if kind == "chain":
            _check_chain_step(s)
        else:
            assert (s["verify_on"], s["verify_input"], s["draft_token_num"]) == ("tree", "DDTreeVerifyInput", 7), s
        assert s["syncs"] == [], s["syncs"]
    measured = steps[-1]["measured"]
    # measured: steps 1..8 that follow a step of their kind (step 9's period ends after the probe)
    expect = [i for i in range(1, 9) if kinds[i - 1] == kinds[i]]
    assert [m[0] for m in measured] == [kinds[i] for i in expect]
    for m, i in zip(measured, expect):
        assert m[1:] == [len(PROMPTS), seconds[kinds[i]], sum(steps[i]["applied"]["accept_lens"])], (i, m)
    rate = {k: sum(m[3] for m in measured[:2] if m[0] == k) / sum(m[2] for m in measured[:2] if m[0] == k)
            for k in ("tree", "chain")}
    best = "tree" if rate["tree"] >= rate["chain"] else "chain"
    assert kinds[4:6] == [best, best], (rate, kinds)
    for b, prompt in enumerate(PROMPTS):
        out = steps[-1]["outputs_after"][b]
        assert len(out) > len(steps) and out == st.greedy_reference(prompt, len(out)), b
