"""DDTREE's decode steps on SGLang v0.5.23's own modules (the ddtree port,
patches/ports/v0.5.23/ddtree), on the CPU stand-ins of standins.py.

The same steps as probes.ddtree_decode_steps on the pin, with what v0.5.23
changed around the worker: ``DFlashWorkerV2._run_draft_block`` returns the
block's KV-location plan (v0.5.23 plans each step's KV locations once, through
``kv_index_translator.plan``), the verify carries its own plan, the draft-KV
append writes the plan's ids in the drafter's pool (``_draft_write_ids``), the
overlap scheduler's reservation is ``nxt_kv_lens`` (``DFlashDraftInputV2.
prepare_for_decode``, v0.5.23's), the workers read the resolved configuration
(``get_spec()``, ``get_parallel()``).  Real, from the tree: the DDTREE worker and
tree logic, DFlash's spec-v2 worker (its draft forward and draft-KV append),
``KVLocPlan`` (mem_cache/kv_loc_plan.py), the overlap reservation and its
page-aligned lengths (mem_cache/allocation_sizing.py), EAGLE's acceptance
(``eagle_sample``) and tree commit (``commit_mamba_states_after_verify``,
``move_accept_tokens_to_target_kvcache``).  Stood in: the GPU stack (the
models, pools, kernels, ``ForwardBatch``), and the KV-index translators as a
server without the unified pool has them (every id space indexes virtual ids
as they are: ``IdSpace(write=None)``).

Each step's record has probes.ddtree_decode_steps' fields, so that
test_worker.py's checks apply unchanged and the records of the two workers can
be compared field for field (test_port_v0_5_23.py).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.ddtree_integration import probes
from tests.ddtree_integration.probes import SPEC, _install

WORKER_MODULES = probes.WORKER_MODULES + [
    "sglang.srt.mem_cache.kv_loc_plan",
    "sglang.srt.mem_cache.allocation_sizing",
    "sglang.kernels.ops.speculative.dflash",  # DFlash's greedy accept (its CPU branch), for DFLASH's own steps
]


DEVICE = None  # the GPU of a real server: torch.device("cpu") (syncs.py: a host copy names "cpu")


class Translator:
    """``KVIndexTranslator`` of a runner without the unified pool: every id space
    indexes the virtual ids (req_to_token's) as they are; its ``plan`` is the
    tree's own ``KVLocPlan``."""

    def __init__(self, plan_mod, name):
        self.plan_mod = plan_mod
        self.name = name
        self.plans = []

    def space(self, kind):
        if kind is self.plan_mod.IdSpaceKind.FULL:
            return self.plan_mod.IdSpace(key=("full", self.name))
        return None

    def plan(self, **kw):
        p = self.plan_mod.KVLocPlan(source=self, **kw)
        self.plans.append(p)
        return p


class _ReqKV:
    """v0.5.23's ``req.kv``: the request's committed and allocated KV lengths
    (standins.Req keeps the committed one on the request, as v0.5.17 did)."""

    def __init__(self, req):
        self._req = req
        self.kv_allocated_len = req.kv.kv_allocated_len

    @property
    def kv_committed_len(self):
        return self._req.kv_committed_len


def _req(prompt):
    from tests.ddtree_integration import standins as st

    r = st.Req(prompt)
    r.kv = _ReqKV(r)
    r.decode_batch_idx = 0
    return r


def _worker_setup(root, cls_name, prompts, block, truth_rank, seed, N, hybrid=True):
    import sys

    import torch

    from tests.ddtree_integration import standins as st

    global DEVICE
    DEVICE = probes.DEVICE = probes._device()  # toy_env's and worker_attrs' device too
    module_file = Path(root).joinpath(*f"{SPEC}.ddtree_worker".split(".")).with_suffix(".py")
    if cls_name == "DDTreeWorker" and not module_file.is_file():
        raise ModuleNotFoundError(f"{SPEC}.ddtree_worker: no {module_file} in this tree")
    if "triton" not in sys.modules:
        torch.compile(lambda x: x, dynamic=True)  # see probes._worker_setup
    torch.Tensor.record_stream = lambda self, stream: None
    record, events = [], []
    spec = SimpleNamespace(speculative_num_draft_tokens=N, speculative_dflash_block_size=block,
                           speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=1.0,
                           speculative_use_rejection_sampling=False, speculative_use_block_verification=False,
                           speculative_eagle_topk=2)
    parallel = SimpleNamespace(tp_group=SimpleNamespace(world_size=1), attn_tp_group=SimpleNamespace(world_size=1),
                               attn_dp_enabled=False, tp_rank=0, tp_size=1)
    _, loader = _install(root, WORKER_MODULES)
    fakes = st.kernel_fakes(record)
    fakes.update({
        "get_spec": lambda: spec,
        "get_parallel": lambda: parallel,
        "mambaish_config": (lambda cfg: SimpleNamespace()) if hybrid else (lambda cfg: None),
        "unwrap_lora_layer": lambda m: m,
        "enable_num_token_non_padded": lambda: False,
        "pp_spec_stable_rows_enabled": lambda: False,
        "maybe_detect_oob": lambda *a, **k: None,
        "maybe_detect_nan": lambda *a, **k: None,
        "sanitize_nan_logits": lambda *a, **k: None,
        "is_dp_attention_enabled": lambda: False,
        "is_pin_memory_available": lambda device=None: False,
        # kernels/ops/sampling.softmax: the temperature-scaled softmax (a Triton kernel on the GPU)
        "sampling_softmax": lambda logits, temperatures: torch.softmax(logits / temperatures, dim=-1),
    })
    v2 = probes.load_with_fakes(loader, fakes, f"{SPEC}.dflash_worker_v2",
                                *([f"{SPEC}.ddtree_worker"] if cls_name == "DDTreeWorker" else []))
    mod = loader.load(f"{SPEC}.ddtree_worker") if cls_name == "DDTreeWorker" else None
    spec_utils = loader.load(f"{SPEC}.spec_utils")
    eagle_utils = loader.load(f"{SPEC}.eagle_utils")
    plan_mod = loader.load("sglang.srt.mem_cache.kv_loc_plan")
    spec_utils._is_cpu = True
    spec_utils.SIMULATE_ACC_LEN = v2.SIMULATE_ACC_LEN = -1.0
    eagle_utils.SIMULATE_ACC_LEN = -1.0
    eagle_utils.verify_tree_greedy_func = fakes["verify_tree_greedy_func"]
    eagle_utils.get_spec = lambda: spec

    cls = getattr(mod, cls_name) if mod is not None else getattr(v2, cls_name)
    toy = probes.toy_env(prompts, block, truth_rank, seed, events, req=_req)
    req_to_token, batch, drafter = toy.req_to_token, toy.batch, toy.drafter
    draft_kv, target, mamba = toy.draft_kv, toy.target, toy.mamba
    batch.maybe_evict_swa = lambda: None
    batch.can_run_decode_cuda_graph = True
    drafter.kv_index_translator = Translator(plan_mod, "draft")
    mamba_pool = SimpleNamespace(replayssm_spec_fold=False, replayssm_is_kda=False, replayssm_cache_base=None)
    model_runner = SimpleNamespace(
        model=toy.model, attn_backend=mamba, device=DEVICE, decode_cuda_graph_runner=None,
        model_config=SimpleNamespace(vocab_size=st.VOCAB, context_len=512),
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token, mamba_pool=mamba_pool),
        kv_index_translator=Translator(plan_mod, "target"),
        server_args=SimpleNamespace(attention_backend="triton"))

    def target_forward(*a, **kw):  # v0.5.23's result also carries the MoE captures (none here)
        out = target.forward_batch_generation(*a, **kw)
        out.routed_experts_output = out.indexer_topk_output = None
        return out

    target_worker = SimpleNamespace(model_runner=model_runner, forward_batch_generation=target_forward, device=DEVICE)
    w = object.__new__(cls)
    attrs = dict(
        probes.worker_attrs(toy, block, hybrid),
        _target_worker=target_worker, target_worker=target_worker, model_runner=model_runner,
        draft_model=SimpleNamespace(**vars(draft_kv.model), embed_tokens=None),
        _target_tp_rank=0, _warned_lilicorr_eager=False,
        _full_embed_gpu=None, _noise_embed_scale=1.0, selector=None, lilicorr=None, _is_domino=False,
        _lilicorr_anchor=None, _target_logits_processor=None, _selector_sample=None,
        _tp_sync=SimpleNamespace(sync=lambda site, *tensors: None),  # one TP rank: nothing to broadcast
        draft_parallel_layout=SimpleNamespace(tp_group=None, disable_cp=False),  # the target's own group
    )
    return probes.finish_worker(w, attrs, cls_name, N, toy, loader,
                                record=record, events=events, mod=mod, spec=spec, v2=v2)


def _schedule(env, overlap: bool) -> None:
    """probes._schedule on v0.5.23: the reservation (committed + 2 x
    speculative_num_draft_tokens, page-aligned) is ``nxt_kv_lens``; v0.5.23's
    prepare_for_decode also seeds the host mirror of the committed lengths."""
    probes._schedule(env, overlap, reservation="nxt_kv_lens_cpu")


def ddtree_decode_steps(root: str, prompts, block=5, budget=6, steps=3, truth_rank=(0, 1, 0, 2), seed=0,
                        sampling=False, overlap=True, hybrid=True, fused_verify=False, draft_graph_padding=None) -> dict:
    """probes.ddtree_decode_steps on v0.5.23: the same record per step, plus the
    KV-location plans the step made (the draft block's and the verify's).  ``draft_graph_padding``:
    the drafter runs as CUDA-graph replays with the tree's draft head in the graph
    (probes._replay_draft_graphs)."""
    N = budget + 1
    w, env = _worker_setup(root, "DDTreeWorker", prompts, block, list(truth_rank), seed, N, hybrid=hybrid)
    if draft_graph_padding is not None:
        probes._replay_draft_graphs(w, env, env.mod, block, budget, int(draft_graph_padding))
    probes.decode_options(w, env, root, prompts, fused_verify, sampling)
    translator = w.target_worker.model_runner.kv_index_translator
    out = []
    for _ in range(steps):
        _schedule(env, overlap)
        n_plans = len(translator.plans)
        step = probes.decode_step(w, env, root, reserved=env.batch.spec_info.nxt_kv_lens_cpu.tolist())
        step["plans"] = [{"write_virtual": p.write_virtual.tolist(), "read_extent": p.read_extent,
                          "seq_lens": p.seq_lens.tolist()} for p in translator.plans[n_plans:]]
        out.append(step)
    return {"steps": out, "prompts": prompts}


def ddtree_decode_configs(root: str, prompts, configs) -> list:
    """ddtree_decode_steps for several configurations in one interpreter."""
    return probes.each_config(ddtree_decode_steps, root, prompts, configs)


def draft_block(root: str, prompts, block=5, seed=0, overlap=True) -> dict:
    """DFlashWorkerV2._run_draft_block (the port's dflash-draft-block.patch) on one
    decode step of DFlash's own worker: what it returns and what the drafter got."""
    w, env = _worker_setup(root, "DFlashWorkerV2", prompts, block, [0, 1], seed, block)
    _schedule(env, overlap)
    batch = env.batch
    translator = w.target_worker.model_runner.kv_index_translator
    seq_before = batch.seq_lens.tolist()
    d = w._run_draft_block(batch, batch.spec_info)
    plan = d.kv_loc_plan
    return {
        "fields": list(type(d)._fields),
        "bs": d.bs,
        "block_ids": d.block_ids.tolist(),
        "positions_2d": d.positions_2d.tolist(),
        "verify_out_cache_loc_2d": d.verify_out_cache_loc_2d.tolist(),
        "hidden_rows": list(d.draft_out.logits_output.hidden_states.shape),
        "lm_head_is_targets": d.lm_head is w.target_worker.model_runner.model.lm_head,
        "plan_is_the_steps": plan is (translator.plans[-1] if translator.plans else None),
        "plan": {"write_virtual": plan.write_virtual.tolist(), "read_extent": plan.read_extent,
                 "seq_lens": plan.seq_lens.tolist(),
                 "draft_write_ids": w._draft_write_ids(plan).tolist()},
        "drafter_got": env.drafter.blocks[-1],
        "seq_before": seq_before,
        "req_to_token": env.req_to_token[:, :64].tolist(),
        "mask_token": w._mask_token_id,
        "bonus": [r.tokens()[-1] for r in env.reqs],
    }


def dflash_chain_steps(root: str, prompts, block=5, steps=2, seed=0, overlap=False) -> dict:
    """DFLASH's own spec-v2 decode steps (v0.5.23's DFlashWorkerV2.forward_batch_generation)
    on the same stand-ins: the chain it verifies, what it commits, and the syncs of each step."""
    w, env = _worker_setup(root, "DFlashWorkerV2", prompts, block, [0, 1], seed, block)
    return probes.chain_steps(w, env, root, steps, lambda: _schedule(env, overlap), kv=True)


def worker_init(root: str, block=16, budget=63, sampler=None) -> dict:
    """DDTreeWorker.__init__ on v0.5.23 with DFlashWorkerV2.__init__ (which loads the drafter
    on the GPU) stood in by a recorder of the resolved speculative values it reads
    (``get_spec()``, the published spec bag): the drafter must be built as DFlash's (N = block,
    topk 1) through the context's one mutation point (``RuntimeContext.override``), the tree's
    values back afterwards; the worker's budget, width and flags are the resolved ones (the
    raw server record keeps its inputs: budget unset).  ``sampler``: the drafter has that
    draft sampler of its own (``selector``, ``lilicorr``, ``domino``).  Then the draft head the
    worker folds into the draft CUDA graphs (``_maybe_build_draft_sampler``)."""
    import torch

    _, loader = _install(root, WORKER_MODULES)
    bag = SimpleNamespace(speculative_num_draft_tokens=budget + 1, speculative_eagle_topk=2,
                          speculative_ddtree_budget=budget, speculative_dflash_block_size=block,
                          speculative_ddtree_chain_batch=None, speculative_ddtree_adaptive=False)
    log = []

    context = probes.SpecContext(bag, log)

    vocab = 32
    lm_head = SimpleNamespace(weight=torch.zeros((vocab, 8)), shard_indices=SimpleNamespace(
        num_org_elements=vocab, num_added_elements=0, org_vocab_start_index=0))
    loader.set_fakes({"get_context": lambda: context, "get_spec": lambda: bag,
                      "get_parallel": lambda: SimpleNamespace(tp_group=SimpleNamespace(world_size=1), tp_rank=0),
                      "get_exec": lambda: SimpleNamespace(graph=SimpleNamespace(cuda_graph_config=SimpleNamespace(
                          decode=SimpleNamespace(bs=[1, 2, 4])))),
                      "unwrap_lora_layer": lambda m: m})
    mod = loader.load(f"{SPEC}.ddtree_worker")
    v2 = loader.load(f"{SPEC}.dflash_worker_v2")
    seen = {}

    def dflash_init(self, server_args, gpu_id, nccl_port, target_worker):
        seen.update(num_draft_tokens=bag.speculative_num_draft_tokens, topk=bag.speculative_eagle_topk)
        self.block_size = int(bag.speculative_num_draft_tokens)
        self.device = "cpu"
        self._target_tp_rank = 0
        self._target_worker = target_worker
        self.selector = object() if sampler == "selector" else None
        self.lilicorr = object() if sampler == "lilicorr" else None
        self._is_domino = sampler == "domino"
        self.draft_model_runner = SimpleNamespace(capture_tail_hooks=[])

    v2.DFlashWorkerV2.__init__ = dflash_init
    raw = SimpleNamespace(speculative_ddtree_budget=None, speculative_num_draft_tokens=None,
                          speculative_dflash_block_size=None)  # the record's raw inputs
    target = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(lm_head=lm_head)))
    w = object.__new__(mod.DDTreeWorker)  # its base derives from a stand-in: a metaclass call would absorb it
    object.__setattr__(w, "target_worker", target)
    try:
        mod.DDTreeWorker.__init__(w, server_args=raw, gpu_id=0, nccl_port=0, target_worker=target)
    except ValueError as e:
        return {"refused": str(e), "seen": seen, "log": log,
                "after": {"num_draft_tokens": bag.speculative_num_draft_tokens, "topk": bag.speculative_eagle_topk}}
    head = w._maybe_build_draft_sampler()
    return {
        "seen": seen,
        "after": {"num_draft_tokens": bag.speculative_num_draft_tokens, "topk": bag.speculative_eagle_topk},
        "log": log,
        "budget": w.budget, "num_verify_tokens": w.num_verify_tokens, "num_draft_positions": w.num_draft_positions,
        "chain_batch": w.chain_batch, "adaptive": w.adaptive is not None, "fused_verify": w.fused_verify,
        "head": None if head is None else {"type": type(head).__name__, "max_bs": head.max_bs,
                                           "width": int(head.buffers["tokens"].shape[1]),
                                           "block_size": head.block_size},
    }


def _graph_setup(root, budget, block, capture_bs):
    """v0.5.23's DecodeCudaGraphRunner (the real class) and runners of it made without their
    GPU ``__init__`` for DDTREE (the published spec bag: N = budget + 1, topk 2)."""
    from tests.ddtree_integration import standins as st

    _, loader = _install(root, WORKER_MODULES + ["sglang.srt.model_executor.runner.decode_cuda_graph_runner"])
    N = budget + 1
    bag = SimpleNamespace(speculative_num_draft_tokens=N, speculative_num_steps=1, speculative_eagle_topk=2,
                          speculative_ddtree_budget=budget, speculative_dflash_block_size=block)
    context = probes.SpecContext(bag)
    loader.set_fakes({"ForwardMode": st.ForwardMode, "CaptureHiddenMode": st.CaptureHiddenMode,
                      "get_spec": lambda: bag, "get_context": lambda: context})
    dcgr = loader.load("sglang.srt.model_executor.runner.decode_cuda_graph_runner")
    algo = loader.load(f"{SPEC}.spec_info").SpeculativeAlgorithm.from_string("DDTREE")
    eagle_info = loader.load(f"{SPEC}.eagle_info")
    Runner = dcgr.DecodeCudaGraphRunner
    max_bs = max(capture_bs)

    def runner(backend_name, is_draft, width, chain=False):
        r = probes.capture_runner(Runner, algo, backend_name, is_draft, width, width, max_bs, SimpleNamespace())
        if chain:
            r.verifies_chain = True
        return r

    def describe(r, info):
        return probes.describe_capture(r, info, eagle_info)

    return SimpleNamespace(loader=loader, Runner=Runner, runner=runner, describe=describe, bag=bag, context=context,
                           N=N, max_bs=max_bs)


def graph_capture(root: str, budget=7, block=4, capture_bs=(1, 4)) -> dict:
    """``DecodeCudaGraphRunner.get_spec_info`` of v0.5.23 (the real method, on a runner made
    without its GPU ``__init__``): the verify input the target's decode CUDA graphs are
    captured with, for a triton and a flashinfer target backend (named by class, which
    DFlash's mask policy reads), for the drafter, for the target's chain-steps runner
    (``verifies_chain``) and for a target runner of the wrong width (arguments that skipped
    DDTREE's rules)."""
    g = _graph_setup(root, budget, block, capture_bs)
    Runner, runner, describe, N, max_bs = g.Runner, g.runner, g.describe, g.N, g.max_bs
    out = {}
    for name in ("TritonAttnBackend", "FlashInferAttnBackend"):
        r = runner(name, False, N)
        out[name] = describe(r, Runner.get_spec_info(r, max_bs * N))
    r = runner("TritonAttnBackend", True, block)
    out["drafter"] = describe(r, Runner.get_spec_info(r, max_bs * block))
    r = runner("TritonAttnBackend", False, block, chain=True)
    out["chain"] = describe(r, Runner.get_spec_info(r, max_bs * block))
    r = runner("TritonAttnBackend", False, block)
    try:
        out["wrong_width"] = describe(r, Runner.get_spec_info(r, max_bs * block))
    except RuntimeError as e:
        out["wrong_width"] = str(e)
    return out


def chain_verify_path(root: str, budget=7, block=4, capture_bs=(1, 4)) -> dict:
    """``ddtree_worker.build_chain_verify`` on v0.5.23 (``--speculative-ddtree-chain-batch`` /
    ``--speculative-ddtree-adaptive``), through probes._chain_path: the spec values its new
    attention backend and its graph runner are built under (DFLASH's: the block and topk 1, set
    in the published spec bag through the context's override), the tree's back after, and the
    input that runner captures with (the real get_spec_info)."""
    g = _graph_setup(root, budget, block, capture_bs)
    worker = g.loader.load(f"{SPEC}.ddtree_worker")
    raw = SimpleNamespace(speculative_num_draft_tokens=None, speculative_eagle_topk=None)  # the record's raw inputs
    return probes._chain_path(worker, g.Runner, g.runner, g.describe, raw, g.bag, g.context.log, block, g.max_bs)


def hybrid_verify_metadata(root: str, bs=2, budget=7, block=4, topk=2) -> dict:
    """v0.5.23's hybrid linear-attention backend (``MambaAttnBackendBase._forward_metadata``,
    the tree path its conv / GDN kernels follow each node's parent by) in TARGET_VERIFY with
    DDTREE's topk 2, for (a) the warm-up verify input v0.5.23 builds for a DFlash-drafted
    algorithm (``spec_info.create_dummy_verify_input``) and (b) a DDTree verify input."""
    import torch

    from tests.ddtree_integration import standins as st

    _, loader = _install(root, ["sglang.srt.layers.attention.hybrid_linear_attn_backend",
                                "sglang.srt.layers.attention.mamba.mamba2_metadata"] + WORKER_MODULES)
    N = budget + 1
    bag = SimpleNamespace(speculative_eagle_topk=topk, speculative_num_draft_tokens=N, speculative_num_steps=1,
                          speculative_ddtree_budget=budget, speculative_dflash_block_size=block)
    loader.set_fakes({"ForwardMode": st.ForwardMode, "get_spec": lambda: bag, "get_spec_config": lambda: bag,
                      "get_memory": lambda: SimpleNamespace(enable_unified_memory=False)})
    hyb = loader.load("sglang.srt.layers.attention.hybrid_linear_attn_backend")
    spec_info = loader.load(f"{SPEC}.spec_info")
    backend = object.__new__(hyb.MambaAttnBackendBase)
    pool = SimpleNamespace(get_mamba_indices=lambda r: r.int() + 1, translate_mamba_indices=lambda x: x,
                           mamba_pool=None, mamba_translate_is_fusable=False)
    hyb.MambaAttnBackendBase.__init__(backend, SimpleNamespace(
        server_args=SimpleNamespace(enable_mis=False), device="cpu", is_draft_worker=False,
        req_to_token_pool=pool, token_to_kv_pool=None))
    backend._translate_mamba_indices = lambda x: x

    def metadata(info):
        mode = st.ForwardMode.TARGET_VERIFY
        fb = SimpleNamespace(batch_size=bs, forward_mode=mode, logical_forward_mode=mode,
                             input_ids=torch.zeros(bs * N, dtype=torch.int64), spec_info=info,
                             req_pool_indices=torch.arange(bs), mamba_track_indices=None, mamba_track_mask=None,
                             mamba_prefill_track_mask_cpu=None, mamba_track_seqlens_cpu=None,
                             extend_seq_lens_cpu=None, extend_prefix_lens_cpu=None,
                             extend_start_loc=None, extend_seq_lens=None,
                             _original_batch_size=None, seq_lens_cpu=None, tbo_parent_token_range=None)
        return probes.linear_metadata(backend._forward_metadata(fb))

    out = {"topk": backend.topk}
    algo = spec_info.SpeculativeAlgorithm.from_string("DFLASH")
    warmup = spec_info.create_dummy_verify_input(algo, None, N, False)
    out["warmup_type"] = type(warmup).__name__
    try:
        out["warmup"] = {"ok": True, "value": metadata(warmup)}
    except Exception as e:  # noqa: BLE001
        out["warmup"] = {"ok": False, "type": type(e).__name__, "message": str(e)}
    out["ddtree"] = probes.ddtree_verify_metadata(loader, metadata, bs, block, budget)
    return out


def ddtree_chain_steps(root: str, prompts, schedule, block=5, budget=6, truth_rank=(0, 1), seed=0, overlap=False,
                       draft_graph_padding=None, capture_bs=None, adaptive=None) -> dict:
    """probes.ddtree_chain_steps on v0.5.23: DDTREE steps with --speculative-ddtree-chain-batch
    set per step (chain steps are DFlashWorkerV2's own, on the chain path's backend), or
    --speculative-ddtree-adaptive (``adaptive``)."""
    N = budget + 1
    w, env = _worker_setup(root, "DDTreeWorker", prompts, block, list(truth_rank), seed, N)
    return probes.chain_schedule_steps(w, env, root, schedule, block, budget, lambda: _schedule(env, overlap),
                                       draft_graph_padding, capture_bs, adaptive)
