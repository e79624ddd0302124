"""Probes run in a fresh interpreter against one tree (see child.py).

Each probe loads only the real upstream/overlay modules it names through the
regression harness's targeted loader; GPU-only modules are inert stand-ins.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from types import SimpleNamespace

SPEC = "sglang.srt.speculative"

# Constants that ServerArgs.add_cli_args concatenates into argparse choices;
# their modules are not loaded (utils/common.py pulls in the GPU stack).
ARGPARSE_CONSTANTS = {
    "SUPPORTED_LORA_TARGET_MODULES": [],
    "LORA_TARGET_ALL_MODULES": "all",
}


def _install(root: str, real: list[str]):
    from sgl_overlay.harness import loader
    from sgl_overlay.harness.standins import install_transformers_standin, install_triton_standin

    install_transformers_standin()
    install_triton_standin()
    base = Path(root)
    present = [m for m in real if (base / Path(*m.split("."))).with_suffix(".py").is_file()]
    return loader.install(base, present), loader


def algorithm(root: str) -> dict:
    """What ``SpeculativeAlgorithm.from_string("DDTREE")`` gives in this tree."""
    _, loader = _install(root, [f"{SPEC}.spec_info", f"{SPEC}.spec_registry", f"{SPEC}.ddtree_tree", f"{SPEC}.ddtree_algo"])
    spec_info = loader.load(f"{SPEC}.spec_info")
    algo = spec_info.SpeculativeAlgorithm.from_string("ddtree")
    out = {
        "class": type(algo).__name__,
        "name": algo.name,
        "is_dflash": algo.is_dflash(),
        "is_ddtree": getattr(algo, "is_ddtree", lambda: False)(),
        "is_eagle": algo.is_eagle(),
        "is_speculative": algo.is_speculative(),
        "supports_spec_v2": algo.supports_spec_v2(),
        "has_validator": getattr(algo, "validate_server_args", None) is not None,
    }

    class _Args:  # the two fields create_worker reads
        disable_overlap_schedule = False

    try:
        algo.create_worker(_Args())
        out["overlap_refusal"] = None
    except ValueError as e:
        out["overlap_refusal"] = str(e)
    return out


_SERVER_ARGS_LOADER = None


def _remember(loader) -> None:
    global _SERVER_ARGS_LOADER
    _SERVER_ARGS_LOADER = (None, loader)


def server_rules(root: str, argv: list[str]) -> dict:
    """Parse ``argv`` with the tree's own ServerArgs.add_cli_args, then run its
    grammar-backend and speculative-decoding rules (the registry's validator
    hook included) on an instance holding the parsed values."""
    _, loader = _SERVER_ARGS_LOADER or _install(
        root,
        [
            "sglang.srt.server_args",
            "sglang.srt.environ",
            f"{SPEC}.spec_info",
            f"{SPEC}.spec_registry",
            f"{SPEC}.ddtree_tree",
            f"{SPEC}.ddtree_algo",
        ],
    )
    # argparse choices built from constants of modules that stay stand-ins
    loader.set_fakes(ARGPARSE_CONSTANTS)
    sa_mod = loader.load("sglang.srt.server_args")
    _remember(loader)
    # The alias resolver opens the draft model's config (network/disk); DDTREE has no alias.
    sa_mod._resolve_speculative_algorithm_alias = lambda algo, *a, **k: algo
    cls = sa_mod.ServerArgs
    parser = argparse.ArgumentParser()
    cls.add_cli_args(parser)
    try:
        ns = parser.parse_args(["--model-path", "m"] + list(argv))
    except SystemExit as e:
        raise ValueError(f"argparse refused {argv}: exit {e.code}") from None
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if hasattr(ns, f.name):
            value = getattr(ns, f.name)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
        else:
            value = None
        object.__setattr__(obj, f.name, value)
    obj._handle_grammar_backend()
    obj._handle_speculative_decoding()
    keys = (
        "speculative_algorithm",
        "speculative_ddtree_budget",
        "speculative_dflash_block_size",
        "speculative_num_draft_tokens",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "disable_overlap_schedule",
        "max_running_requests",
        "grammar_backend",
        "disable_cuda_graph",
    )
    return {k: getattr(obj, k, "<no such field>") for k in keys}


def server_rules_many(root: str, argvs: list[list[str]]) -> list[dict]:
    """``server_rules`` for several command lines in one interpreter (the module
    is loaded once; each command line gets a fresh instance)."""
    out = []
    for argv in argvs:
        try:
            out.append({"ok": True, "value": server_rules(root, argv)})
        except Exception as e:  # noqa: BLE001 - a refusal is a result
            out.append({"ok": False, "type": type(e).__name__, "message": str(e)})
    return out


# --------------------------------------------------------------------------
# Decode steps of the DFlash / DDTREE workers on CPU stand-ins (standins.py)
# --------------------------------------------------------------------------

WORKER_MODULES = [
    f"{SPEC}.spec_info",
    f"{SPEC}.spec_registry",
    f"{SPEC}.ddtree_algo",
    f"{SPEC}.ddtree_tree",
    f"{SPEC}.ddtree_worker",
    f"{SPEC}.dflash_worker",
    f"{SPEC}.dflash_info",
    f"{SPEC}.dflash_utils",
    f"{SPEC}.eagle_info",
    f"{SPEC}.eagle_info_v2",
    f"{SPEC}.eagle_worker",
]


def _worker_setup(root, cls_module, cls_name, prompts, block, truth_rank, seed, extra_attrs):
    import sys

    import torch

    from tests.ddtree_integration import standins as st

    record = []
    module_file = Path(root).joinpath(*cls_module.split(".")).with_suffix(".py")
    if not module_file.is_file():
        raise ModuleNotFoundError(f"{cls_module}: no {module_file} in this tree")
    if cls_name == "DDTreeWorker" and "triton" not in sys.modules:
        # eagle_worker.py (EAGLE's Mamba tree commit) applies torch.compile at import;
        # torch's compiler stack must be imported while triton is genuinely absent
        # (before the loader stubs it).
        torch.compile(lambda x: x, dynamic=True)  # imports the compiler stack; compiles nothing

    _, loader = _install(root, WORKER_MODULES)
    fakes = st.kernel_fakes(record)
    allocator = st.Allocator()
    fakes["alloc_token_slots"] = lambda tree_cache, n, *a, **k: allocator.alloc(int(n))
    loader.set_fakes(fakes)
    mod = loader.load(cls_module)
    import sys

    for m, loaded in list(sys.modules.items()):
        if not m.startswith("sglang.") or loader.is_stub(loaded):
            continue
        for name, fake in fakes.items():
            if name in loaded.__dict__ and loader.is_stub(loaded.__dict__[name]):
                setattr(loaded, name, fake)
    cls = getattr(mod, cls_name)
    reqs = [st.Req(p) for p in prompts]
    req_to_token = torch.full((len(reqs), 256), -1, dtype=torch.int64)
    batch = st.Batch(reqs, req_to_token, allocator)
    # the prompt's KV (all tokens but the bonus) is in the cache already
    for b, r in enumerate(reqs):
        n = len(r.tokens()) - 1
        req_to_token[b, :n] = allocator.alloc(n)
    batch_ref = [batch]
    drafter = st.OracleDrafter(batch_ref, block, truth_rank, seed)
    drafter.token_to_kv_pool_allocator = allocator
    drafter.req_to_token_pool = batch.req_to_token_pool
    draft_kv = st.DraftKV()
    drafter.token_to_kv_pool = draft_kv.pool
    target = st.ToyTarget()
    mamba = st.MambaBackend()
    embed = torch.nn.Embedding(st.VOCAB, 4)
    lm_head = SimpleNamespace(
        weight=torch.eye(st.VOCAB),
        shard_indices=SimpleNamespace(num_org_elements=st.VOCAB, num_org_elements_padded=st.VOCAB,
                                      num_added_elements=0, org_vocab_start_index=0,
                                      added_vocab_start_index=st.VOCAB),
    )
    model = SimpleNamespace(get_input_embeddings=lambda: embed, lm_head=lm_head)
    model_runner = SimpleNamespace(model=model, attn_backend=mamba, device="cpu",
                                   model_config=SimpleNamespace(vocab_size=st.VOCAB))
    target_worker = SimpleNamespace(model_runner=model_runner,
                                    forward_batch_generation=target.forward_batch_generation)
    w = object.__new__(cls)
    attrs = dict(
        server_args=SimpleNamespace(mamba_track_interval=256), target_worker=target_worker,
        model_runner=model_runner, draft_model_runner=drafter, draft_model=draft_kv.model, page_size=1,
        block_size=block, device="cpu", draft_window_size=None, use_compact_draft_cache=False,
        _mask_token_id=st.VOCAB - 1, _block_pos_offsets=torch.arange(block, dtype=torch.int64),
        _draft_block_ids_buf=None, _draft_block_positions_buf=None, _draft_block_tokens_buf=None,
        _draft_block_end_buf=None, _draft_seq_lens_cpu_buf=None, _draft_block_spec_info=None,
        _use_fused_kv_materialize=False, _fused_kv_helper=None, tp_rank=0,
        _warned_sampling_fallback=False, _logged_first_verify=True,
        _draft_greedy_gathered_max_buf=None, _draft_greedy_gathered_ids_buf=None, _draft_greedy_gather_cap=0,
        _draft_greedy_best_rank_buf=None, _draft_greedy_rank_index_buf=None,
        _draft_greedy_selected_ids_buf=None, _draft_greedy_index_cap=0,
    )
    attrs.update(extra_attrs)
    for k, v in attrs.items():
        object.__setattr__(w, k, v)
    dflash_info = loader.load(f"{SPEC}.dflash_info")
    draft_input = dflash_info.DFlashDraftInput(
        bonus_tokens=torch.tensor([r.tokens()[-1] for r in reqs], dtype=torch.int64),
        target_hidden=torch.zeros((0, 3)),
        ctx_lens=torch.zeros(len(reqs), dtype=torch.int32),
        draft_seq_lens=batch.seq_lens.to(torch.int32),
    )
    batch.spec_info = draft_input
    env = SimpleNamespace(record=record, allocator=allocator, batch=batch, reqs=reqs, req_to_token=req_to_token,
                          draft_kv=draft_kv, target=target, mamba=mamba, loader=loader, mod=mod)
    return w, env


def _t(x):
    return {"dtype": str(x.dtype), "shape": list(x.shape), "values": x.tolist()}


def dflash_chain_step(root: str, prompts, block=5, seed=0) -> dict:
    """DFlashWorker._prepare_for_speculative_decoding on the stand-ins: the chain
    verify input it builds (same inputs on any tree -> same result)."""
    w, env = _worker_setup(root, f"{SPEC}.dflash_worker", "DFlashWorker", prompts, block, [0, 1], seed, {})
    w._prepare_for_speculative_decoding(env.batch, env.batch.spec_info)
    vi = env.batch.spec_info
    return {"draft_token": _t(vi.draft_token), "positions": _t(vi.positions),
            "has_run_draft_block": hasattr(type(w), "_run_draft_block")}


def ddtree_decode_steps(root: str, prompts, block=5, budget=6, steps=3, truth_rank=(0, 1, 0, 2), seed=0,
                        sampling=False) -> dict:
    """DDTREE decode steps (draft, tree, verify, commit) through the worker's real
    forward_batch_generation on the stand-ins; returns what each step fed the
    kernels and what it committed."""
    import torch

    w, env = _worker_setup(root, f"{SPEC}.ddtree_worker", "DDTreeWorker", prompts, block, list(truth_rank), seed,
                           dict(budget=budget, num_verify_tokens=budget + 1, num_draft_positions=block - 1))
    if sampling:
        from tests.ddtree_integration import standins as st

        env.batch.sampling_info = st.Sampled(len(prompts))
        # eagle_info imports these from sgl_kernel only on CUDA builds (is_cuda())
        eagle_info = env.loader.load(f"{SPEC}.eagle_info")
        fakes = st.kernel_fakes(env.record)
        for name in ("tree_speculative_sampling_target_only", "top_k_renorm_prob", "top_p_renorm_prob"):
            setattr(eagle_info, name, fakes[name])
    out = []
    for _ in range(steps):
        batch = env.batch
        seq_before = batch.seq_lens.tolist()
        outputs_before = [list(r.output_ids) for r in env.reqs]
        n_freed = len(env.allocator.freed)
        n_slots = len(env.draft_kv.slots)
        w.forward_batch_generation(batch)
        call = env.target.calls[-1]
        vi = call["spec_info"]
        k = env.record[-1]
        out.append({
            "verify_input": {
                "mro": [c.__name__ for c in type(vi).__mro__],
                "spec_input_type": int(vi.spec_input_type),
                "draft_token": _t(vi.draft_token), "positions": _t(vi.positions),
                "retrieve_index": _t(vi.retrieve_index), "retrieve_next_token": _t(vi.retrieve_next_token),
                "retrieve_next_sibling": _t(vi.retrieve_next_sibling),
                "custom_mask": _t(vi.custom_mask),
                "spec_steps": vi.spec_steps, "topk": vi.topk, "draft_token_num": vi.draft_token_num,
                "seq_lens_sum": vi.seq_lens_sum,
            },
            "kernel": {"accept_index": _t(k["accept_index"]), "accept_token_num": _t(k["accept_token_num"]),
                       "predicts": _t(k["predicts"]), "sampling": k.get("sampling", False),
                       "draft_probs_all_zero": k.get("draft_probs_all_zero"),
                       "thresholds": [k.get("threshold_single"), k.get("threshold_acc")]},
            "verify_slots": call["out_cache_loc"].tolist(),
            "seq_before": seq_before,
            "seq_after": batch.seq_lens.tolist(),
            "seq_lens_cpu_after": batch.seq_lens_cpu.tolist(),
            "seq_lens_sum_after": batch.seq_lens_sum,
            "outputs_before": outputs_before,
            "outputs_after": [list(r.output_ids) for r in env.reqs],
            "freed": env.allocator.freed[n_freed:],
            "req_to_token": env.req_to_token[:, :64].tolist(),
            "mamba_commit": env.mamba.commits[-1],
            "draft_kv": {str(s): v for s, v in list(env.draft_kv.slots.items())[n_slots:]},
            "spec_info_after": type(batch.spec_info).__name__,
            "bonus_after": batch.spec_info.bonus_tokens.tolist(),
        })
    return {"steps": out, "prompts": prompts}


def ddtree_decode_configs(root: str, prompts, configs) -> list:
    """ddtree_decode_steps for several configurations in one interpreter."""
    out = []
    for cfg in configs:
        try:
            out.append({"ok": True, "value": ddtree_decode_steps(root, prompts, **cfg)})
        except Exception as e:  # noqa: BLE001
            import traceback

            out.append({"ok": False, "type": type(e).__name__, "message": str(e),
                        "traceback": traceback.format_exc()[-3000:]})
    return out


def _mamba_slot(req_pool_indices):
    """The stand-in request pool's map from request to Mamba state slot (request + 1)."""
    return req_pool_indices.int() + 1


def _linear_backend(hyb, server_args):
    """The tree's real ``MambaAttnBackendBase`` on CPU over the stand-in request pool."""
    backend = object.__new__(hyb.MambaAttnBackendBase)
    hyb.MambaAttnBackendBase.__init__(backend, SimpleNamespace(
        server_args=server_args, device="cpu", req_to_token_pool=SimpleNamespace(get_mamba_indices=_mamba_slot)))
    return backend


def hybrid_verify_metadata(root: str, bs=2, budget=7, block=4, topk=2) -> dict:
    """The hybrid linear-attention backend's TARGET_VERIFY metadata (the tree
    path that makes its conv / GDN / Mamba kernels follow each node's parent),
    for (a) the verify input the model runner's warm-up builds for a
    DFlash-drafted algorithm and (b) a DDTree verify input."""
    import torch

    from tests.ddtree_integration import standins as st

    _, loader = _install(root, [
        "sglang.srt.layers.attention.hybrid_linear_attn_backend",
        "sglang.srt.layers.attention.mamba.mamba2_metadata",
    ] + WORKER_MODULES)
    hyb = loader.load("sglang.srt.layers.attention.hybrid_linear_attn_backend")
    dflash_info = loader.load(f"{SPEC}.dflash_info")
    N = budget + 1
    backend = _linear_backend(hyb, SimpleNamespace(speculative_eagle_topk=topk))

    class VerifyMode:
        def is_decode_or_idle(self):
            return False

        def is_extend(self, include_draft_extend_v2=False):
            return True

        def is_draft_extend_v2(self):
            return False

        def is_target_verify(self):
            return True

    def metadata(spec_info):
        fb = SimpleNamespace(batch_size=bs, forward_mode=VerifyMode(), input_ids=torch.zeros(bs * N, dtype=torch.int64),
                             spec_info=spec_info, req_pool_indices=torch.arange(bs), mamba_track_mask=None)
        md = backend._forward_metadata(fb)
        return {
            "query_start_loc": md.query_start_loc.tolist(),
            "retrieve_next_token": None if md.retrieve_next_token is None else md.retrieve_next_token.tolist(),
            "retrieve_next_sibling": None if md.retrieve_next_sibling is None else md.retrieve_next_sibling.tolist(),
            "retrieve_parent_token": None if md.retrieve_parent_token is None
            else {"dtype": str(md.retrieve_parent_token.dtype), "shape": list(md.retrieve_parent_token.shape)},
        }

    out = {"topk": backend.topk}
    # (a) model_runner._dummy_run's verify input for is_dflash() algorithms
    warmup = dflash_info.DFlashVerifyInput(draft_token=None, positions=None, draft_token_num=N, custom_mask=None)
    try:
        out["warmup"] = {"ok": True, "value": metadata(warmup)}
    except Exception as e:  # noqa: BLE001
        out["warmup"] = {"ok": False, "type": type(e).__name__, "message": str(e)}
    # (b) a DDTree verify input
    try:
        worker = loader.load(f"{SPEC}.ddtree_worker")
        tree_mod = loader.load(f"{SPEC}.ddtree_tree")
        g = torch.Generator().manual_seed(0)
        logits = torch.randn((bs, block - 1, st.VOCAB), generator=g)
        ids, lps = tree_mod.topk_logprobs(logits, budget)
        tree = tree_mod.build_ddtree(ids, lps, budget)
        seq = torch.tensor([5, 9][:bs], dtype=torch.int64)
        vi = worker.make_verify_input(tree, torch.tensor([1, 2][:bs]), seq, seq.clone(), int(seq.sum()), block - 1)
        md = metadata(vi)
        md["same_arrays"] = (md["retrieve_next_token"] == vi.retrieve_next_token.tolist()
                             and md["retrieve_next_sibling"] == vi.retrieve_next_sibling.tolist())
        out["ddtree"] = {"ok": True, "value": md}
    except Exception as e:  # noqa: BLE001
        out["ddtree"] = {"ok": False, "type": type(e).__name__, "message": str(e)}
    return out


def tp_topk(root: str, tp=3, bs=2, L=3, vocab=50, hidden=8, budget=9, seed=0) -> dict:
    """DDTreeWorker._draft_topk_logprobs on ``tp`` simulated ranks, each holding a
    vocabulary shard of the LM head (the last one short), with an all-gather
    that concatenates the ranks' inputs; compared with the single-rank result
    over the whole vocabulary."""
    import torch

    _, loader = _install(root, WORKER_MODULES)
    shard = -(-vocab // tp)
    g = torch.Generator().manual_seed(seed)
    W = torch.randn((vocab, hidden), generator=g)
    Hs = torch.randn((bs, L, hidden), generator=g) * 3

    class Group:
        def __init__(self, rank, inputs):
            self.world_size, self.rank, self.inputs, self.calls = tp, rank, inputs, 0

        def all_gather_into_tensor(self, out, inp):
            key = self.calls
            self.calls += 1
            self.inputs.setdefault(key, {})[self.rank] = inp.clone()
            if len(self.inputs[key]) == tp:
                out.copy_(torch.cat([self.inputs[key][r] for r in range(tp)]))

    def run(rank, inputs, world):
        lo, hi = rank * shard, min(vocab, (rank + 1) * shard)
        w = torch.zeros((shard, hidden))
        w[: hi - lo] = W[lo:hi]
        lm_head = SimpleNamespace(weight=w, shard_indices=SimpleNamespace(
            num_org_elements=hi - lo, num_org_elements_padded=shard, num_added_elements=0,
            org_vocab_start_index=lo, added_vocab_start_index=vocab))
        mod = loader.load(f"{SPEC}.ddtree_worker")
        mod.get_tp_group = lambda: world
        worker = object.__new__(mod.DDTreeWorker)
        object.__setattr__(worker, "budget", budget)
        object.__setattr__(worker, "model_runner", SimpleNamespace(model_config=SimpleNamespace(vocab_size=vocab)))
        return worker._draft_topk_logprobs(Hs, lm_head)

    inputs = {}
    # pass 1: every rank contributes its shard's candidates (outputs not used)
    for r in range(tp):
        run(r, inputs, Group(r, inputs))
    # pass 2: every rank gathers all contributions
    results = []
    for r in range(tp):
        grp = Group(r, {k: dict(v) for k, v in inputs.items()})
        results.append(run(r, grp.inputs, grp))
    tree_mod = loader.load(f"{SPEC}.ddtree_tree")
    ref_ids, ref_lps = tree_mod.topk_logprobs(torch.matmul(Hs.reshape(-1, hidden), W.T).view(bs, L, vocab), budget)
    return {
        "ranks_identical": all(torch.equal(results[0][0], x[0]) and torch.equal(results[0][1], x[1]) for x in results),
        "ids_equal": torch.equal(results[0][0], ref_ids),
        "max_lp_diff": float((results[0][1] - ref_lps).abs().max()),
        "shapes": [list(results[0][0].shape), str(results[0][0].dtype), str(results[0][1].dtype)],
    }


def worker_init(root: str, block=16, budget=63) -> dict:
    """DDTreeWorker.__init__ with DFlashWorker.__init__ (which loads the drafter on
    the GPU through a TpModelWorker) stood in by a recorder of the server
    arguments it sees: the drafter must be built as DFlash's (N = block, topk 1),
    the target's arguments restored afterwards (N = budget + 1, topk 2)."""
    _, loader = _install(root, WORKER_MODULES)
    mod = loader.load(f"{SPEC}.ddtree_worker")
    seen = {}

    def dflash_init(self, server_args, **kw):
        seen.update(num_draft_tokens=server_args.speculative_num_draft_tokens,
                    topk=server_args.speculative_eagle_topk, kwargs=sorted(kw))
        self.block_size = int(server_args.speculative_num_draft_tokens)
        self.tp_rank = 0

    mod.DFlashWorker.__init__ = dflash_init
    sa = SimpleNamespace(speculative_dflash_block_size=block, speculative_ddtree_budget=budget,
                         speculative_num_draft_tokens=budget + 1, speculative_eagle_topk=2)
    w = mod.DDTreeWorker(sa, 0, 0, None, 0, 0, 0, 12345, SimpleNamespace())
    out = {"seen": seen, "after": [sa.speculative_num_draft_tokens, sa.speculative_eagle_topk],
           "worker": [w.block_size, w.budget, w.num_verify_tokens, w.num_draft_positions]}
    sa.speculative_num_draft_tokens = 16  # arguments that skipped finish_ddtree_server_args
    try:
        mod.DDTreeWorker(sa, 0, 0, None, 0, 0, 0, 12345, SimpleNamespace())
        out["unfinished"] = None
    except RuntimeError as e:
        out["unfinished"] = str(e)
    return out


def tp_topk_many(root: str, tps) -> list:
    return [tp_topk(root, tp=tp) for tp in tps]


GRAPH_MODULES = WORKER_MODULES + [
    "sglang.srt.model_executor.cuda_graph_runner",
    "sglang.srt.model_executor.forward_batch_info",
    "sglang.srt.layers.attention.hybrid_linear_attn_backend",
    "sglang.srt.layers.attention.mamba.mamba2_metadata",
    "sglang.srt.layers.attention.triton_backend",
]


def graph_verify(root: str, budget=7, block=4, seq_lens=(9, 1, 5), capture_bs=(1, 4), vocab=64) -> dict:
    """DDTREE's target verify through the tree's real CUDA-graph code, on CPU:

    (a) ``CudaGraphRunner.get_spec_info``: the verify input the target's graphs are
        captured with, for a triton and a flashinfer target backend (named by class,
        which is what DFlash's mask policy reads), and the drafter's;
    (b) capture metadata of the real ``HybridLinearAttnBackend`` (a real
        ``TritonAttnBackend`` for the full-attention layers, a real
        ``MambaAttnBackendBase`` for the linear ones) at the largest captured bs;
    (c) ``CudaGraphRunner.replay_prepare`` of a DDTree verify batch of
        ``len(seq_lens)`` requests, padded to a captured bs: what reaches the static
        buffers the graph reads (``DecodeInputBuffers.create`` allocates them, on CPU).

    Only the Triton kernel that fills kv_indices is a stand-in (absorbed)."""
    import torch

    _, loader = _install(root, GRAPH_MODULES)
    loader.set_fakes({"get_moe_expert_parallel_world_size": lambda: 1})  # one GPU, no expert parallelism
    fbi = loader.load("sglang.srt.model_executor.forward_batch_info")
    cgr = loader.load("sglang.srt.model_executor.cuda_graph_runner")
    hyb = loader.load("sglang.srt.layers.attention.hybrid_linear_attn_backend")
    tri = loader.load("sglang.srt.layers.attention.triton_backend")
    spec_mod = loader.load(f"{SPEC}.spec_info")
    algo = spec_mod.SpeculativeAlgorithm.from_string("DDTREE")
    eagle_info = loader.load(f"{SPEC}.eagle_info")
    worker = loader.load(f"{SPEC}.ddtree_worker")
    tree_mod = loader.load(f"{SPEC}.ddtree_tree")
    N = budget + 1
    max_bs = max(capture_bs)
    target_args = SimpleNamespace(speculative_ddtree_budget=budget, speculative_dflash_block_size=block,
                                  speculative_num_draft_tokens=N, speculative_eagle_topk=2, speculative_num_steps=1,
                                  enable_return_hidden_states=False)
    # what DFlashWorker.__init__ deep-copies for its draft runner (ddtree_worker._as_dflash_drafter)
    draft_args = SimpleNamespace(**{**vars(target_args), "speculative_num_draft_tokens": block,
                                    "speculative_eagle_topk": 1})

    def runner(backend_name, is_draft):
        args = draft_args if is_draft else target_args
        r = object.__new__(cgr.CudaGraphRunner)
        r.model_runner = SimpleNamespace(spec_algorithm=algo, is_draft_worker=is_draft, server_args=args,
                                         attn_backend=type(backend_name, (), {})(), hisparse_coordinator=None)
        n = args.speculative_num_draft_tokens
        r.speculative_num_steps, r.speculative_num_draft_tokens, r.num_tokens_per_bs = 1, n, n
        r.buffers = SimpleNamespace(custom_mask=torch.ones((max_bs + max_bs * n) * n, dtype=torch.bool))
        return r

    def describe(r, info):
        return {
            "type": type(info).__name__,
            "tree_input": isinstance(info, eagle_info.EagleVerifyInput),
            "static_mask": info.custom_mask is not None and info.custom_mask is r.buffers.custom_mask,
            "draft_token_num": info.draft_token_num,
            "topk": getattr(info, "topk", None),
            "capture_hidden_mode": fbi.CaptureHiddenMode(info.capture_hidden_mode).name,
        }

    out = {"capture": {}}
    for name in ("TritonAttnBackend", "FlashInferAttnBackend"):
        r = runner(name, False)
        out["capture"][name] = describe(r, cgr.CudaGraphRunner.get_spec_info(r, max_bs * N))
    r = runner("TritonAttnBackend", True)
    out["capture"]["drafter"] = describe(r, cgr.CudaGraphRunner.get_spec_info(r, max_bs * block))
    # a target runner whose verify width is not budget + 1 (server arguments that skipped DDTREE's rules)
    r = runner("TritonAttnBackend", False)
    r.num_tokens_per_bs = block
    try:
        cgr.CudaGraphRunner.get_spec_info(r, max_bs * block)
        out["capture"]["wrong_width"] = None
    except RuntimeError as e:
        out["capture"]["wrong_width"] = str(e)

    # ---- the backends, with their real graph state
    req_pool_size, ctx = 8, 64
    req_to_token = torch.arange(req_pool_size * ctx, dtype=torch.int32).view(req_pool_size, ctx)
    linear = _linear_backend(hyb, target_args)
    full = object.__new__(tri.TritonAttnBackend)
    full.__dict__.update(
        device="cpu", num_head=2, max_kv_splits=2, v_head_dim=4, swa_v_head_dim=None, max_context_len=ctx,
        skip_prefill=False, sliding_window_size=None, num_draft_tokens=N, req_to_token=req_to_token,
        kv_indptr=torch.zeros(max_bs + 1, dtype=torch.int32), qo_indptr=torch.zeros(max_bs + 1, dtype=torch.int32),
        mask_indptr=torch.zeros(max_bs + 1, dtype=torch.int64), window_kv_indptr=None, speculative_num_steps=1)
    backend = object.__new__(hyb.HybridLinearAttnBackend)  # its base is a stand-in: no class call
    hyb.HybridLinearAttnBackend.__init__(backend, full, linear, [1])
    backend.init_cuda_graph_state(max_bs, max_bs * N)

    g = cgr.CudaGraphRunner
    r = runner("TritonAttnBackend", False)
    r.buffers = cgr.DecodeInputBuffers.__dict__["create"].__func__(
        lambda **kw: _Buffers(cgr, kw), device="cpu", max_bs=max_bs, max_num_token=max_bs * N, hidden_size=8,
        vocab_size=vocab, dtype=torch.float32, dp_size=1, pp_size=1, is_encoder_decoder=False,
        require_mlp_tp_gather=False, seq_len_fill_value=backend.get_cuda_graph_seq_len_fill_value(),
        encoder_len_fill_value=0, num_tokens_per_bs=N, cache_loc_dtype=torch.int64, enable_mamba_track=False)
    r.__dict__.update(
        attn_backend=backend, capture_bs=sorted(capture_bs), require_mlp_tp_gather=False, require_gathered_buffer=False,
        nsa_enable_prefill_cp=False, enable_two_batch_overlap=False, enable_pdmux=False, is_encoder_decoder=False,
        seq_len_fill_value=backend.get_cuda_graph_seq_len_fill_value(), capture_forward_mode=fbi.ForwardMode.TARGET_VERIFY,
        capture_hidden_mode=fbi.CaptureHiddenMode.FULL)

    # (b) capture at the largest bs, with what get_spec_info gives
    cap_info = g.get_spec_info(r, max_bs * N)
    backend.init_forward_metadata_capture_cuda_graph(
        max_bs, max_bs * N, r.buffers.req_pool_indices[:max_bs], r.buffers.seq_lens[:max_bs], None,
        fbi.ForwardMode.TARGET_VERIFY, cap_info)
    fm, lm = full.forward_metadata, linear.forward_metadata
    out["capture_metadata"] = {
        "triton_static_mask": fm.custom_mask is not None and fm.custom_mask.data_ptr() == full.cuda_graph_custom_mask.data_ptr(),
        "lcrs_static": lm.retrieve_next_token is linear.retrieve_next_token_list[max_bs - 1]
        and lm.retrieve_next_sibling is linear.retrieve_next_sibling_list[max_bs - 1]
        and lm.retrieve_parent_token is linear.retrieve_parent_token_list[max_bs - 1],
    }

    # (c) replay of one DDTree step
    raw_bs = len(seq_lens)
    gen = torch.Generator().manual_seed(0)
    ids, lps = tree_mod.topk_logprobs(torch.randn((raw_bs, block - 1, vocab), generator=gen), budget)
    tree = tree_mod.build_ddtree(ids, lps, budget)
    seq = torch.tensor(seq_lens, dtype=torch.int64)
    vi = worker.make_verify_input(tree, torch.arange(raw_bs) + 1, seq, seq.clone(), int(seq.sum()), block - 1)
    req_pool_indices = torch.tensor([3, 5, 6, 2, 7][:raw_bs], dtype=torch.int64)
    fb = SimpleNamespace(
        batch_size=raw_bs, input_ids=vi.draft_token, req_pool_indices=req_pool_indices, seq_lens=seq,
        seq_lens_cpu=seq.clone(), seq_lens_sum=int(seq.sum()), out_cache_loc=torch.arange(raw_bs * N) + 100,
        positions=vi.positions, spec_info=vi, forward_mode=fbi.ForwardMode.TARGET_VERIFY,
        capture_hidden_mode=fbi.CaptureHiddenMode.FULL, mrope_positions=None, encoder_lens=None, input_embeds=None,
        mamba_track_indices=None, mamba_track_mask=None, num_token_non_padded=torch.tensor([raw_bs * N]))
    g.replay_prepare(r, fb)
    bs = r.bs
    mask = vi.custom_mask.to(torch.uint8)
    seq_mask_len = N * (seq + N)
    out["replay"] = {
        "raw_bs": r.raw_bs, "bs": bs, "num_tokens_per_bs": r.num_tokens_per_bs,
        "input_ids": r.buffers.input_ids[:raw_bs * N].tolist() == vi.draft_token.tolist(),
        "positions": r.buffers.positions[:raw_bs * N].tolist() == vi.positions.tolist(),
        "mask_len": int(mask.numel()), "mask_expected_len": int(seq_mask_len.sum()),
        "mask": full.cuda_graph_custom_mask[:mask.numel()].tolist() == mask.tolist(),
        "mask_indptr": full.mask_indptr[1:raw_bs + 1].tolist() == torch.cumsum(seq_mask_len, 0).tolist(),
        "qo_indptr": full.qo_indptr[:bs + 1].tolist(),
        "next_token": linear.retrieve_next_token_list[bs - 1][:raw_bs].tolist() == vi.retrieve_next_token.tolist(),
        "next_sibling": linear.retrieve_next_sibling_list[bs - 1][:raw_bs].tolist() == vi.retrieve_next_sibling.tolist(),
        "state_indices": linear.state_indices_list[bs - 1].tolist(),
        "expected_state_indices": _mamba_slot(req_pool_indices).tolist() + [-1] * (bs - raw_bs),
        "query_start_loc": linear.forward_metadata.query_start_loc.tolist(),
        "metadata_static": linear.forward_metadata.retrieve_next_token is linear.retrieve_next_token_list[bs - 1],
    }
    return out


def chain_verify_replay(root: str, seq_lens=(9, 1, 5), bs=4, draft_tokens=4) -> dict:
    """A chain target verify (DFLASH's: topk 1, the real ``DFlashVerifyInput``) of
    ``len(seq_lens)`` requests replayed in a CUDA graph captured for ``bs``, through the
    real ``MambaAttnBackendBase`` of the hybrid models: the Mamba slot and query range of
    every row.  The inputs are what ``CudaGraphRunner.replay_prepare`` hands the backend:
    the requests, then padding rows with the runner's fill values (request 0, sequence
    length ``get_cuda_graph_seq_len_fill_value()``)."""
    import torch

    _, loader = _install(root, GRAPH_MODULES)
    loader.set_fakes({"get_moe_expert_parallel_world_size": lambda: 1})
    fbi = loader.load("sglang.srt.model_executor.forward_batch_info")
    hyb = loader.load("sglang.srt.layers.attention.hybrid_linear_attn_backend")
    dflash_info = loader.load(f"{SPEC}.dflash_info")
    N, raw_bs = draft_tokens, len(seq_lens)
    linear = _linear_backend(hyb, SimpleNamespace(speculative_eagle_topk=1, speculative_num_draft_tokens=N))
    linear.init_cuda_graph_state(bs, bs * N)
    fill = linear.get_cuda_graph_seq_len_fill_value()
    req_pool_indices = torch.tensor([3, 5, 6, 2, 7][:raw_bs] + [0] * (bs - raw_bs), dtype=torch.int64)
    seq = torch.tensor(list(seq_lens) + [fill] * (bs - raw_bs), dtype=torch.int64)
    info = dflash_info.DFlashVerifyInput(draft_token=torch.arange(raw_bs * N), positions=torch.arange(raw_bs * N),
                                         draft_token_num=N)
    linear.init_forward_metadata_replay_cuda_graph(bs, req_pool_indices.clone(), seq, int(seq.sum()), None,
                                                   fbi.ForwardMode.TARGET_VERIFY, info, seq.clone())
    return {
        "fill": fill,
        "state_indices": linear.forward_metadata.mamba_cache_indices.tolist(),
        "expected_state_indices": _mamba_slot(req_pool_indices[:raw_bs]).tolist() + [-1] * (bs - raw_bs),
        "query_start_loc": linear.forward_metadata.query_start_loc.tolist(),
        "expected_query_start_loc": [i * N for i in range(raw_bs + 1)] + [raw_bs * N] * (bs - raw_bs),
    }


class _Buffers(SimpleNamespace):
    """``DecodeInputBuffers`` with its real ``populate_from_forward_batch`` (the
    class itself derives from a stand-in base here, so ``create`` is handed this
    constructor)."""

    def __init__(self, cgr, fields):
        super().__init__(**fields)
        self._populate = cgr.DecodeInputBuffers.__dict__["populate_from_forward_batch"]

    def populate_from_forward_batch(self, **kw):
        return self._populate(self, **kw)
