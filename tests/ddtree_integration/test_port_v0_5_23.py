"""The ddtree topic's port to SGLang v0.5.23 (patches/ports/v0.5.23/ddtree;
docs/ddtree-sglang.md, "v0.5.23 port"): DDTREE's worker on v0.5.23's
DFlashWorkerV2 with its registration, warm-up fields and CUDA-graph capture
(CPU evidence only: probes_v0_5_23.py, compared with the pin's worker), and
``--dtype float32`` for DFlash's drafter and the Qwen3.5 hybrid's Gated
DeltaNet chunk path.

Default tree: v0.5.23 with the whole port applied strictly
(tests/port_tree.py).  ``--tree DIR``: any tree holding ``sglang/`` or
``python/sglang/``; the export runs each patch's ``Evidence:`` tests on
v0.5.23 with the series' earlier patches (they must fail) and with the patch
too (they must pass).  ``v0523`` is the pristine release, for the controls
(what the port must leave as v0.5.23 has it).

The probes are test_float32.py's (float32_probes.py): the tree's own
``ModelRunner._extend_forward_kwargs``, and every GDN / conv / attention
kernel of the hybrid's calls through Triton's front end for an H200 target
(the ``[kernels]`` extra's triton 3.6 and einops; skipped without them, which
an evidence run reports as not passing).  Expectations are stated from the
patches' intent (float32 in, float32 through, IEEE dots under
TRITON_F32_DEFAULT=ieee), not read from a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sgl_overlay import release_trees
from sgl_overlay.harness import source_root

from tests import port_tree
from tests.ddtree_integration.run import probe
from tests.ddtree_integration.test_float32 import F32_ENV, PROBES, embeds, failures, hybrid, needs_triton

SERIES_DIR = port_tree.PORTS / "ddtree"
IEEE = {"TRITON_F32_DEFAULT": "ieee"}
KKT = "chunk_gated_delta_rule_fwd_kkt_solve_kernel"
# the GDN chunk path's kernels: chunk_gated_delta_rule runs them all once past its dtype check
CHUNK_KERNELS = {KKT, "recompute_w_u_fwd_kernel", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
                 "chunk_fwd_kernel_o", "l2norm_fwd_kernel", "chunk_local_cumsum_scalar_kernel"}


@pytest.fixture(scope="module")
def port(request, tmp_path_factory) -> Path:
    given = request.config.getoption("--tree")
    if given:
        return source_root(given)
    return source_root(port_tree.build(SERIES_DIR, tmp_path_factory.mktemp("ddtree-port-v0.5.23") / "sglang"))


@pytest.fixture(scope="module")
def v0523() -> Path:
    return source_root(release_trees.release_tree(port_tree.RELEASE))


# -- float32-draft-embeddings.patch -------------------------------------------

def test_float32_drafter_gets_float32_embeddings(port):
    """v0.5.23's _extend_forward_kwargs casts input_embeds to bfloat16 for every
    model: a float32 drafter's first projection then raises "expected m1 and m2
    to have the same dtype, but got: c10::BFloat16 != float" (the H200's failure)."""
    assert embeds(port, "float32") == {"dtype": "torch.float32", "linear": "ok"}


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16"])
def test_other_dtypes_keep_v0_5_23s_cast(port, v0523, model_dtype):
    """Control: bfloat16 and float16 models get what v0.5.23 gives them (bfloat16)."""
    ours, theirs = embeds(port, model_dtype), embeds(v0523, model_dtype)
    assert ours == theirs and ours["dtype"] == "torch.bfloat16"


# -- float32-gdn-chunk.patch --------------------------------------------------

@needs_triton
def test_float32_hybrid_kernels_compile(port):
    """With the float32 environment (conv states float32, TRITON_F32_DEFAULT=ieee)
    every call of the hybrid's prefill, decode, verify and drafter returns and
    every kernel compiles for float32, the GDN chunk path's among them, every
    tl.dot IEEE.  v0.5.23 refuses in chunk_gated_delta_rule ("does not support
    float32. Please use bfloat16.")."""
    r = hybrid(port, "float32", F32_ENV)
    assert r["conv_state_dtype"] == "torch.float32"
    assert failures(r) == []
    kernels = {k["kernel"] for c in r["calls"].values() for k in c["kernels"]}
    assert CHUNK_KERNELS <= kernels, sorted(CHUNK_KERNELS - kernels)
    precisions = {p for c in r["calls"].values() for k in c["kernels"] for p in k["dots"]}
    assert precisions == {"ieee"}, precisions


def _kkt(tree, dtype, env=None):
    """The fused kkt + solve kernel as the call compiled it (each of its
    compilations: v0.5.23 compiles it more than once): the dots' precisions
    summed and the TTIR digests."""
    call = "extend.kkt_solve"
    ks = [k for k in hybrid(tree, dtype, env, [call])["calls"][call]["kernels"] if k["kernel"] == KKT]
    assert ks and all(k["ok"] for k in ks), ks
    dots = {}
    for k in ks:
        for p, n in k["dots"].items():
            dots[p] = dots.get(p, 0) + n
    return {"dots": dots, "ttir_sha256": sorted(k["ttir_sha256"] for k in ks)}


@needs_triton
def test_merge_dots_follow_triton_f32_default(port):
    """Under TRITON_F32_DEFAULT=ieee the fused kkt + solve kernel's dots are all
    IEEE (its block-merge dots name TF32 on an H200 in v0.5.23, which the
    variable does not override)."""
    k = _kkt(port, "float32", IEEE)
    assert set(k["dots"]) == {"ieee"}, k["dots"]


@needs_triton
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_kkt_kernel_unchanged_without_the_variable(port, v0523, dtype):
    """Control: without TRITON_F32_DEFAULT the kernel compiles to v0.5.23's TTIR."""
    a, b = _kkt(v0523, dtype), _kkt(port, dtype)
    assert a["ttir_sha256"] == b["ttir_sha256"] and a["dots"] == b["dots"], (a, b)


# -- the upstream-style unit test the series adds ------------------------------

UPSTREAM_TEST = Path("test/registered/unit/model_executor/test_extend_forward_kwargs.py")


def test_upstream_unit_test_passes(port):
    """test/registered/unit/model_executor/test_extend_forward_kwargs.py (added
    by float32-draft-embeddings.patch, SGLang's test layout) passes on the tree,
    run with the tree's own model_runner.py (probe upstream_unit_test: a CPU
    interpreter without SGLang's GPU dependencies cannot import it whole)."""
    root = port.parent if port.name == "python" else None
    if root is None or not (root / UPSTREAM_TEST).is_file():
        pytest.fail(f"{UPSTREAM_TEST} is not in the tree {port} (a checkout layout with test/ is needed)")
    r = probe(port, "upstream_unit_test", module=PROBES, path=str(root / UPSTREAM_TEST))
    assert r.get("ok"), r
    assert r["value"]["run"] == 2 and r["value"]["failed"] == [], r["value"]


# -- DDTREE on v0.5.23's DFlashWorkerV2 (dflash-draft-block.patch, ddtree-algorithm.patch) --
#
# The worker's real decode steps on v0.5.23's own modules with the CPU stand-ins of
# standins.py (probes_v0_5_23.py), checked as test_worker.py checks the pin's
# (_check_steps), and compared element for element with the pin's worker (v0.5.17 +
# the pinned stack and its overlay: ``pin``) on the same prompts, drafter and target.
# Nothing of it has run on a GPU: v0.5.23 needs torch 2.14.1.

from tests.ddtree_integration import standins as st  # noqa: E402
from tests.ddtree_integration.test_worker import CONFIGS, PROMPTS, _check_steps  # noqa: E402

V523 = "tests.ddtree_integration.probes_v0_5_23"
# What the two workers must agree on, step for step: the verify input, the kernel's
# acceptance, the commit (KV, Mamba state, drafter KV, lengths, tokens) and the
# draft block.  ``reserved`` is each release's own reservation rule (compared apart).
SAME = ("verify_input", "kernel", "draft_block", "verify_slots", "seq_before", "seq_after", "published",
        "events", "applied", "outputs_before", "outputs_after", "req_to_token_before", "req_to_token",
        "target_kv", "moves", "mamba_commit", "draft_kv", "spec_info_after", "bonus_after", "syncs")


@pytest.fixture(scope="module")
def pin(pinned_lock, tmp_path_factory) -> Path:
    """The pinned stack with its overlay on v0.5.17 (the pin's DDTREE worker), built
    here whatever ``--tree`` names (that is the v0.5.23 tree under test)."""
    from sgl_overlay import builder, series

    dest = tmp_path_factory.mktemp("pin") / "sglang"
    builder.build(pinned_lock, series.load(port_tree.ROOT), dest)
    return dest


def _steps(tree, configs, module=None):
    kw = {} if module is None else {"module": module}
    r = probe(tree, "ddtree_decode_configs", prompts=PROMPTS, configs=configs, timeout=600, **kw)
    assert r["ok"], f"DDTREE decode probe on {tree}: {r.get('type')}: {r.get('message')}"
    out = []
    for cfg, res in zip(configs, r["value"]):
        assert res["ok"], f"DDTREE decode step on {tree} failed: {res.get('type')}: {res.get('message')}\n" \
                          f"{res.get('traceback')}"
        out.append(res["value"]["steps"])
    return out


def _compare(port, pin, configs):
    ours, theirs = _steps(port, configs, V523), _steps(pin, configs)
    differ = 0
    for cfg, a, b in zip(configs, ours, theirs):
        differ += _check_steps(a, cfg)
        assert len(a) == len(b) == cfg["steps"]
        for i, (x, y) in enumerate(zip(a, b)):
            for key in SAME:
                assert x[key] == y[key], f"{cfg}: step {i}: {key} differs from the pin's worker"
            # v0.5.23 reserves committed + 2N page-aligned (page size 1: the same slots)
            assert x["reserved"] == y["reserved"], f"{cfg}: step {i}: reservation"
            # the step's two KV-location plans: the draft block's, then the verify's
            N, block = cfg["budget"] + 1, cfg["block"]
            r2t = x["req_to_token_before"]
            assert [p["read_extent"] for p in x["plans"]] == [block, N], x["plans"]
            for p, width in zip(x["plans"], (block, N)):
                assert p["seq_lens"] == x["seq_before"]
                assert p["write_virtual"] == [s for b_, P in enumerate(x["seq_before"])
                                              for s in r2t[b_][P:P + width]]
            assert x["plans"][1]["write_virtual"] == x["verify_slots"]
    return differ


def test_draft_block_is_dflashs_draft_forward(port):
    """dflash-draft-block.patch: DFlashWorkerV2._run_draft_block is the decode step's
    draft forward on v0.5.23: the drafter got [bonus, MASK x (block - 1)] at positions
    prefix .. prefix + block - 1 in the slots req_to_token[prefix + k], and the block it
    returns holds them, the target's LM head and the step's KVLocPlan of that window
    (read extent = the block), whose ids in the drafter's pool are those slots.  v0.5.23
    has no such method (AttributeError)."""
    r = probe(port, "draft_block", module=V523, prompts=PROMPTS, block=5)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    v = r["value"]
    assert v["fields"] == ["bs", "block_ids", "positions_2d", "verify_out_cache_loc_2d", "draft_out", "lm_head",
                           "embed_module", "kv_loc_plan"]
    bs, block = len(PROMPTS), 5
    slots = [row[P:P + block] for row, P in zip(v["req_to_token"], v["seq_before"])]
    assert v["bs"] == bs
    assert v["block_ids"] == [[b] + [v["mask_token"]] * (block - 1) for b in v["bonus"]]
    assert v["positions_2d"] == [list(range(P, P + block)) for P in v["seq_before"]]
    assert v["verify_out_cache_loc_2d"] == slots
    flat = [s for row in slots for s in row]
    assert v["drafter_got"] == {"input_ids": [t for row in v["block_ids"] for t in row],
                                "positions": [p for row in v["positions_2d"] for p in row],
                                "out_cache_loc": flat}
    assert v["hidden_rows"][0] == bs * block and v["lm_head_is_targets"] and v["plan_is_the_steps"]
    assert v["plan"] == {"write_virtual": flat, "read_extent": block, "seq_lens": v["seq_before"],
                         "draft_write_ids": flat}


def test_dflash_steps_are_v0_5_23s(port, v0523):
    """Control (do no harm): DFLASH's own decode steps on the port equal pristine
    v0.5.23's (chain, positions, verify slots, commits, drafter KV), are plain greedy
    decoding of the toy target and read no device value on the host."""
    def run(tree):
        r = probe(tree, "dflash_chain_steps", module=V523, prompts=PROMPTS, block=5, steps=2, seed=3)
        assert r["ok"], f"{r.get('type')}: {r.get('message')}"
        return r["value"]

    ours, theirs = run(port), run(v0523)
    assert ours["steps"] == theirs["steps"]
    assert ours["has_run_draft_block"] and not theirs["has_run_draft_block"]
    for s in ours["steps"]:
        assert s["syncs"] == [], s["syncs"]
    for b, prompt in enumerate(PROMPTS):
        out = ours["steps"][-1]["outputs_after"][b]
        assert len(out) > 2 and out == st.greedy_reference(prompt, len(out))


def test_ddtree_is_registered(port):
    """ddtree-algorithm.patch: ``from_string("DDTREE")`` is DDTreeSpecAlgo on v0.5.23, with
    every method of v0.5.23's SpeculativeAlgorithm (get_platform_worker_cls among them),
    the drafter's width 16 and the target's 64, and its worker with the overlap scheduler
    is DDTreeWorker.  v0.5.23 does not know the name."""
    r = probe(port, "algorithm")
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    v = r["value"]
    assert v["class"] == "DDTreeSpecAlgo" and v["name"] == "DDTREE"
    assert v["is_dflash"] and v["is_dflash_family"] and v["is_ddtree"] and not v["is_eagle"]
    assert v["supports_overlap"] is True and v["has_validator"] and v["missing_methods"] == []
    assert v["verify_width"] == {"target": 64, "drafter": 16}
    assert v["overlap_worker"] == "DDTreeWorker"


def test_ddtree_decode_steps_are_the_pins(port, pin):
    """ddtree-algorithm.patch: DDTREE's decode steps on v0.5.23 (three configurations:
    block 4-6, budget 5-12, 3 requests, 2-3 steps, hybrid target, the overlap scheduler's
    GPU-only path) pass every check of test_worker.py's decode tests (no host
    synchronisation, EAGLE's tree input, the mask, positions, LCRS parents, the path,
    the Mamba commit of the last accepted node, the KV move, the drafter's KV, plain
    greedy output), and feed the verify and accept and commit exactly what the pin's
    worker does on the same inputs; the verify and the draft block each run on the
    step's KVLocPlan of their window.  v0.5.23 has no DDTREE worker."""
    differ = _compare(port, pin, [dict(c, overlap=True) for c in CONFIGS])
    assert differ > 0, "some step must accept a sibling path (last node != accept length)"


def test_ddtree_decode_without_overlap_dense_and_sampling_are_the_pins(port, pin):
    """The same comparison without the overlap scheduler (the scheduler's host mirror of
    the lengths), on a dense target (no Mamba commit) and at temperature 1
    (tree_speculative_sampling_target_only with all-zero draft probabilities)."""
    _compare(port, pin, [dict(CONFIGS[0], overlap=False), dict(CONFIGS[1], hybrid=False),
                         dict(CONFIGS[1], sampling=True)])


def test_ddtree_decode_with_the_draft_head_in_the_graph_is_the_pins(port, pin):
    """The drafter's forward as CUDA-graph replays with DDTREE's draft head folded in (two
    padded rows of noise, no hidden states handed back, as probes._replay_draft_graphs
    replays them): every step takes its tree from the head's buffers, and feeds the verify and
    commits what the pin's worker does, with and without the overlap scheduler."""
    _compare(port, pin, [dict(CONFIGS[0], draft_graph_padding=2), dict(CONFIGS[1], draft_graph_padding=2,
                                                                       overlap=False)])


def test_ddtree_decode_with_the_verify_kernel_is_the_pins(port, pin, monkeypatch):
    """The verify input from the tree's one Triton kernel (ddtree_triton, in Triton's
    interpreter on this CPU, as a CUDA worker whose start-up check passed builds it),
    with and without the overlap scheduler: the same checks and the pin's values."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _compare(port, pin, [dict(CONFIGS[0], fused_verify=True), dict(CONFIGS[2], fused_verify=True, overlap=False)])


def _ddtree_start(tree, **server):
    """The harness's start-up of dflash-smoke (Qwen3.6-27B shape, the z-lab drafter of block
    16, one H200-class card) with DDTREE: v0.5.23's own ServerArgs resolution and KV sizing."""
    import dataclasses

    from sgl_overlay.harness import load_scenario, run_scenario

    sc = load_scenario("dflash-smoke").respelled()  # v0.5.23 refuses the renamed flags' old spellings
    args = dict(sc.server, speculative_algorithm="DDTREE", max_running_requests=1, max_mamba_cache_size=4,
                mem_fraction_static=0.9, **server)
    args.pop("speculative_dflash_block_size")  # the block comes from the drafter's config, as DFLASH's does
    rep = run_scenario(tree, dataclasses.replace(sc, server=args)).to_json()
    resolved = {r["flag"]: r["resolved"] for r in rep["figures"].get("resolution", [])}
    return rep, resolved


def test_ddtree_server_starts_on_v0_5_23(port):
    """ddtree-algorithm.patch: `--speculative-algorithm DDTREE --speculative-ddtree-budget 31`
    goes through v0.5.23's server-argument resolution (the registry's validator and
    handle_server_args hooks, run through record_foreign_defaults) to the KV sizing: the
    drafter's block 16, speculative_num_draft_tokens = budget + 1 = 32 (the verify width the
    sizing reads), topk 2, one step, the grammar backend off, the overlap scheduler on; and
    page size 2 is refused naming --page-size.  v0.5.23 does not know the algorithm."""
    from sgl_overlay.harness import Outcome

    rep, resolved = _ddtree_start(port, speculative_ddtree_budget=31)
    assert rep["outcome"] == Outcome.OK, rep["reason"]
    assert rep["figures"]["speculative_num_draft_tokens"] == 32
    assert rep["figures"]["disable_overlap_schedule"] is False
    assert resolved["speculative_dflash_block_size"] == 16
    assert resolved["speculative_num_draft_tokens"] == 32
    assert resolved["speculative_eagle_topk"] == 2 and resolved["speculative_num_steps"] == 1
    assert resolved["grammar_backend"] == "none"
    rep, _ = _ddtree_start(port, speculative_ddtree_budget=31, page_size=2)
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    assert "--speculative-algorithm DDTREE: --page-size 2 is not supported" in rep["reason"], rep["reason"]


def test_worker_init_builds_dflashs_drafter(port):
    """ddtree-algorithm.patch: DDTreeWorker.__init__ on v0.5.23 builds DFlash's drafter with
    DFlash's values in the published spec bag (N = block 16, topk 1: what v0.5.23's worker,
    draft runner and graphs read through get_spec()), set and restored through
    RuntimeContext.override (the tree's N = 64, topk 2 after); the worker's budget and widths
    are the resolved ones (the raw record's budget is unset); the draft head folded into the
    draft graphs is a DDTreeDraftHead of the largest captured batch, N wide.  A drafter with
    a draft sampler of its own (a candidate selector, LiLiCorr, Domino) is refused, naming
    DFLASH.  v0.5.23 has no DDTREE worker."""
    r = probe(port, "worker_init", module=V523)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    v = r["value"]
    assert v["seen"] == {"num_draft_tokens": 16, "topk": 1}
    assert v["after"] == {"num_draft_tokens": 64, "topk": 2}
    assert [src for src, _ in v["log"]] == ["ddtree.drafter", "ddtree.tree"]
    assert (v["budget"], v["num_verify_tokens"], v["num_draft_positions"]) == (63, 64, 15)
    assert v["chain_batch"] is None and v["adaptive"] is False and v["fused_verify"] is False
    assert v["head"] == {"type": "DDTreeDraftHead", "max_bs": 4, "width": 64, "block_size": 16}
    for sampler, name in (("selector", "candidate selector"), ("lilicorr", "LiLiCorr head"),
                          ("domino", "Domino rollout")):
        r = probe(port, "worker_init", module=V523, sampler=sampler)
        assert r["ok"], f"{r.get('type')}: {r.get('message')}"
        v = r["value"]
        assert v["refused"].startswith(f"DDTREE: the draft model has a {name}"), v
        assert "--speculative-algorithm DFLASH" in v["refused"]
        assert v["after"] == {"num_draft_tokens": 64, "topk": 2}, "the tree's values restored after a refusal"


def test_hybrid_warmup_takes_the_tree_path(port):
    """dflash-verify-tree-fields.patch: with DDTREE's topk 2, v0.5.23's hybrid linear-attention
    backend reads the tree arrays from every TARGET_VERIFY input; the warm-up verify input
    v0.5.23 builds for a DFlash-drafted algorithm (create_dummy_verify_input: a
    DFlashVerifyInput) now takes its dummy-run branch (no parent tensor), and a DDTree verify
    input's LCRS arrays reach the kernels with the [bs, N] int64 parent tensor.  v0.5.23 (+ the
    earlier patches): AttributeError on the warm-up input, a hybrid target's start-up failure."""
    r = probe(port, "hybrid_verify_metadata", module=V523, bs=2, budget=7, block=4)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    v = r["value"]
    assert v["topk"] == 2 and v["warmup_type"] == "DFlashVerifyInput"
    w = v["warmup"]
    assert w["ok"], f"warm-up verify input breaks the tree path: {w.get('type')}: {w.get('message')}"
    assert w["value"]["query_start_loc"] == [0, 8, 16]
    assert w["value"]["retrieve_parent_token"] is None, "a warm-up has no tree: no parent tensor"
    d = v["ddtree"]
    assert d["ok"], f"DDTree verify input: {d.get('type')}: {d.get('message')}"
    assert d["value"]["query_start_loc"] == [0, 8, 16] and d["value"]["same_arrays"]
    assert d["value"]["retrieve_parent_token"] == {"dtype": "torch.int64", "shape": [2, 8]}


def test_target_graphs_capture_the_tree_input(port):
    """ddtree-cuda-graph.patch: v0.5.23's DecodeCudaGraphRunner.get_spec_info captures DDTREE's
    target verify with EAGLE's tree input (DDTreeVerifyInput: the runner's static custom mask,
    N = budget + 1, topk 2, L = block - 1 spec steps, FULL hidden capture) for a triton and a
    flashinfer target; the drafter's graphs and the chain steps' runner (verifies_chain) keep
    DFlash's chain input at the block's width; a target runner of another width is refused.
    v0.5.23 (+ the earlier patches) captures the target with DFlash's chain input (topk 1; no
    mask for flashinfer) and refuses nothing.  (Replay is not stood in on v0.5.23: the pin's
    test_graphs.py replays on v0.5.17's backends only.)"""
    r = probe(port, "graph_capture", module=V523, budget=7, block=4)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    v = r["value"]
    tree = {"type": "DDTreeVerifyInput", "tree_input": True, "static_mask": True, "draft_token_num": 8, "topk": 2,
            "spec_steps": 3, "capture_hidden_mode": "FULL"}
    assert v["TritonAttnBackend"] == tree and v["FlashInferAttnBackend"] == tree
    assert v["drafter"] == {"type": "DFlashVerifyInput", "tree_input": False, "static_mask": False,
                            "draft_token_num": 4, "topk": 1, "spec_steps": None, "capture_hidden_mode": "NULL"}
    assert v["chain"] == dict(v["drafter"], capture_hidden_mode="FULL")
    assert isinstance(v["wrong_width"], str) and "captured with 4 tokens per request" in v["wrong_width"] \
        and "budget + 1 = 8" in v["wrong_width"], v["wrong_width"]


def test_tp_topk_merge_on_v0_5_23(port):
    """ddtree-algorithm.patch: with tensor parallelism (v0.5.23's get_parallel().tp_group) every
    rank builds the same tree: TP 2 and 3, the last shard short, all ranks get the single-rank
    top-K over the whole vocabulary (ids exact, log-probs within 1e-4).  v0.5.23 has no DDTREE
    worker."""
    r = probe(port, "tp_topk_many", tps=[2, 3])
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    for v in r["value"]:
        assert v["ranks_identical"] and v["ids_equal"], v
        assert v["max_lp_diff"] < 1e-4, v
        assert v["shapes"] == [[2, 3, 9], "torch.int64", "torch.float32"]


def test_chain_verify_path_is_dflashs(port):
    """ddtree-algorithm.patch: the chain steps' verify path on v0.5.23
    (``build_chain_verify``, for --speculative-ddtree-chain-batch and --speculative-ddtree-adaptive)
    builds a new target attention backend (a new workspace) and a DecodeCudaGraphRunner marked
    verifies_chain while the published spec bag holds DFLASH's values (the block 4, topk 1),
    set and restored through RuntimeContext.override (the tree's 8 and 2 after; the raw record
    untouched); that runner captures DFlash's chain input at the block's width.  v0.5.23 has no
    DDTREE worker."""
    r = probe(port, "chain_verify_path", module=V523, budget=7, block=4)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    v = r["value"]
    assert v["backend"] == {"spec_bag": [4, 1], "server_args": [None, None], "init_new_workspace": True}
    run = v["runner"]
    assert (run["spec_bag"], run["width"], run["verifies_chain"], run["own_backend"]) == ([4, 1], 4, True, True)
    assert run["capture"] == {"type": "DFlashVerifyInput", "tree_input": False, "static_mask": False,
                              "draft_token_num": 4, "topk": 1, "spec_steps": None, "capture_hidden_mode": "FULL"}
    assert v["after"] == {"spec_bag": [8, 2], "server_args": [None, None]}
    assert v["init_new_workspace_after"] is False and v["runner_is_built"]
    assert v["overrides"] == ["ddtree.chain_verify", "ddtree.tree"]


def _chain_records(tree, schedule, module=None, **kw):
    extra = {} if module is None else {"module": module}
    r = probe(tree, "ddtree_chain_steps", prompts=PROMPTS, schedule=schedule, block=5, budget=6, seed=3,
              timeout=600, **extra, **kw)
    assert r["ok"], f"DDTREE chain-batch probe on {tree}: {r.get('type')}: {r.get('message')}"
    return r["value"]["steps"]


@pytest.mark.parametrize("kw", [{}, {"draft_graph_padding": 2}, {"overlap": True},
                                {"adaptive": dict(seconds={"tree": 3.0, "chain": 1.0}, run_steps=2, min_samples=1,
                                                  explore_every=100)}],
                         ids=["eager", "draft-graph", "overlap", "adaptive"])
def test_chain_and_tree_steps_are_the_pins(port, pin, kw):
    """ddtree-algorithm.patch: with --speculative-ddtree-chain-batch set per step (chain batch
    unset, 1, 4, 3, unset, 2 for 3 requests), or with --speculative-ddtree-adaptive (a clock
    charging the tree 3 s and the chain 1 s a step), DDTREE's steps on v0.5.23 switch between
    the tree's and the chain's verify paths as the pin's worker does: the same path, verify
    input, chain, positions, slots, commits, acceptance, measured samples and tokens at every
    step; chain steps are DFlashWorkerV2's own (on v0.5.23, v0.5.23's), no host read, plain
    greedy output.  v0.5.23 has no DDTREE worker."""
    schedule = [None] * 10 if "adaptive" in kw else [None, 1, 4, 3, None, 2]
    ours, theirs = _chain_records(port, schedule, V523, **kw), _chain_records(pin, schedule, **kw)
    assert len(ours) == len(theirs) == len(schedule)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"step {i} differs from the pin's worker: " \
                       f"{ {k: (a[k], b[k]) for k in a if a[k] != b.get(k)} }"
        assert a["syncs"] == [], a["syncs"]
    assert {s["verify_on"] for s in ours} == {"tree", "chain"}
    for b, prompt in enumerate(PROMPTS):
        out = ours[-1]["outputs_after"][b]
        assert len(out) > len(schedule) and out == st.greedy_reference(prompt, len(out)), b
