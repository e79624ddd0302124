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
    from sgl_overlay.harness.child import loader
    from sgl_overlay.harness.child.standins import install_transformers_standin, install_triton_standin

    install_transformers_standin()
    install_triton_standin()
    base = Path(root)
    present = [m for m in real if (base / Path(*m.split("."))).with_suffix(".py").is_file()]
    return loader.install(base, present), loader


def algorithm(root: str) -> dict:
    """What ``SpeculativeAlgorithm.from_string("DDTREE")`` gives in this tree, and
    what the scheduler and the graph runners ask of it."""
    _, loader = _install(root, [f"{SPEC}.spec_info", f"{SPEC}.spec_registry", f"{SPEC}.ddtree_tree", f"{SPEC}.ddtree_adaptive",
                                f"{SPEC}.ddtree_algo",
                                f"{SPEC}.ddtree_worker"])
    loader.set_fakes({"get_spec": lambda: SimpleNamespace(speculative_dflash_block_size=16)})
    spec_info = loader.load(f"{SPEC}.spec_info")
    algo = spec_info.SpeculativeAlgorithm.from_string("ddtree")
    # every method the builtin algorithms offer that the scheduler, the overlap relay or
    # the graph runners call on the configured algorithm
    enum_methods = sorted(n for n, v in vars(spec_info.SpeculativeAlgorithm).items()
                          if callable(v) and not n.startswith("_") and n not in ("from_string", "register"))
    out = {
        "class": type(algo).__name__,
        "name": algo.name,
        "is_dflash": algo.is_dflash(),
        "is_dflash_family": algo.is_dflash_family(),
        "is_ddtree": getattr(algo, "is_ddtree", lambda: False)(),
        "is_eagle": algo.is_eagle(),
        "is_speculative": algo.is_speculative(),
        "supports_target_verify_for_draft": algo.supports_target_verify_for_draft(),
        "supports_overlap": getattr(algo, "supports_overlap", None),
        "has_validator": getattr(algo, "validate_server_args", None) is not None,
        "missing_methods": [n for n in enum_methods if not callable(getattr(algo, n, None))],
        "need_topk": algo.need_topk() if hasattr(algo, "need_topk") else None,
        "verify_width": {"target": algo.get_num_tokens_per_req_for_target_verify(64, False),
                         "drafter": algo.get_num_tokens_per_req_for_target_verify(64, True)},
    }

    class _Args:  # the field create_worker reads: overlap on (SGLang's default)
        disable_overlap_schedule = False

    try:
        worker = algo.create_worker(_Args())
        out["overlap_worker"] = getattr(worker, "__name__", repr(worker))
    except Exception as e:  # noqa: BLE001 - a refusal is a result
        out["overlap_worker"] = f"{type(e).__name__}: {e}"
    return out


_SERVER_ARGS_LOADER = None


def _remember(loader) -> None:
    global _SERVER_ARGS_LOADER
    _SERVER_ARGS_LOADER = (None, loader)


def server_rules(root: str, argv: list[str]) -> dict:
    """Parse ``argv`` with the tree's own ServerArgs.add_cli_args, then run its
    grammar-backend rule and its speculative-decoding rules
    (``arg_groups/speculative_hook.handle_speculative_decoding``: the registry's
    validator hook and the algorithm's ``handle_server_args``) on an instance
    holding the parsed values (device cuda, as on the GPU)."""
    _, loader = _SERVER_ARGS_LOADER or _install(
        root,
        [
            "sglang.srt.server_args",
            "sglang.srt.arg_groups.speculative_hook",
            "sglang.srt.arg_groups.arg_utils",
            "sglang.srt.arg_groups.argparse_actions",
            "sglang.srt.arg_groups.overrides",
            "sglang.srt.environ",
            f"{SPEC}.spec_info",
            f"{SPEC}.spec_registry",
            f"{SPEC}.ddtree_tree",
            f"{SPEC}.ddtree_adaptive",
            f"{SPEC}.ddtree_algo",
        ],
    )
    # argparse choices built from constants of modules that stay stand-ins
    loader.set_fakes(ARGPARSE_CONSTANTS)
    sa_mod = loader.load("sglang.srt.server_args")
    hook = loader.load("sglang.srt.arg_groups.speculative_hook")
    _remember(loader)
    # The alias resolver opens the draft model's config (network/disk); DDTREE has no alias.
    hook._resolve_speculative_algorithm_alias = lambda algo, *a, **k: algo
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
    if obj.device is None:
        object.__setattr__(obj, "device", "cuda")
    obj._handle_grammar_backend()
    hook.handle_speculative_decoding(obj)
    keys = (
        "speculative_algorithm",
        "speculative_ddtree_budget",
        "speculative_ddtree_chain_batch",
        "speculative_ddtree_adaptive",
        "speculative_dflash_block_size",
        "speculative_num_draft_tokens",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "disable_overlap_schedule",
        "max_running_requests",
        "grammar_backend",
        "disable_cuda_graph",
        "linear_attn_decode_backend",
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
# Decode steps of the spec-v2 DFLASH / DDTREE workers on CPU stand-ins (standins.py)
# --------------------------------------------------------------------------

WORKER_MODULES = [
    f"{SPEC}.spec_info",
    f"{SPEC}.spec_registry",
    f"{SPEC}.ddtree_adaptive",
    f"{SPEC}.ddtree_algo",
    f"{SPEC}.ddtree_tree",
    f"{SPEC}.ddtree_worker",
    f"{SPEC}.dflash_worker_v2",
    f"{SPEC}.dflash_info",
    f"{SPEC}.dflash_info_v2",
    f"{SPEC}.dflash_utils",
    f"{SPEC}.draft_worker_common",
    f"{SPEC}.eagle_info",
    f"{SPEC}.eagle_utils",
    f"{SPEC}.spec_utils",
]


def _device():
    import torch

    return torch.device("cpu")  # the GPU of a real server (syncs.py: a host copy names "cpu")


DEVICE = None  # set by _worker_setup


def _worker_setup(root, cls_module, cls_name, prompts, block, truth_rank, seed, N, hybrid=True):
    """The real spec-v2 worker class ``cls_name`` (an instance made without its
    GPU ``__init__``) over the stand-ins, with a batch of ``prompts`` whose KV
    (every token but the last, the bonus) is in the target cache."""
    import sys

    import torch

    from tests.ddtree_integration import standins as st

    global DEVICE
    DEVICE = _device()
    record, events = [], []
    module_file = Path(root).joinpath(*cls_module.split(".")).with_suffix(".py")
    if not module_file.is_file():
        raise ModuleNotFoundError(f"{cls_module}: no {module_file} in this tree")
    if "triton" not in sys.modules:
        # spec_utils / overlap code applies torch.compile at import; torch's compiler stack
        # must be imported while triton is genuinely absent (before the loader stubs it).
        torch.compile(lambda x: x, dynamic=True)
    torch.Tensor.record_stream = lambda self, stream: None  # CUDA streams: nothing to record on a CPU

    spec = SimpleNamespace(speculative_num_draft_tokens=N, speculative_dflash_block_size=block,
                           speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=1.0,
                           speculative_use_rejection_sampling=False, speculative_eagle_topk=2)
    _, loader = _install(root, WORKER_MODULES)
    fakes = st.kernel_fakes(record)
    fakes["get_spec"] = lambda: spec
    fakes["mambaish_config"] = (lambda cfg: SimpleNamespace()) if hybrid else (lambda cfg: None)
    mod = load_with_fakes(loader, fakes, cls_module)
    spec_utils = loader.load(f"{SPEC}.spec_utils")
    eagle_utils = loader.load(f"{SPEC}.eagle_utils")
    v2 = loader.load(f"{SPEC}.dflash_worker_v2")
    # the CPU branches of the kernels' dispatch, and no simulated acceptance
    spec_utils._is_cpu = True
    spec_utils.assign_extend_cache_locs_cpu = fakes["assign_extend_cache_locs_cpu"]
    spec_utils.SIMULATE_ACC_LEN = v2.SIMULATE_ACC_LEN = -1.0
    eagle_utils.verify_tree_greedy_func = fakes["verify_tree_greedy_func"]

    cls = getattr(mod, cls_name)
    toy = toy_env(prompts, block, truth_rank, seed, events)
    req_to_token, draft_kv, target, mamba = toy.req_to_token, toy.draft_kv, toy.target, toy.mamba
    mamba_pool = SimpleNamespace(replayssm_spec_fold=False, replayssm_is_kda=False, replayssm_cache_base=None)
    model_runner = SimpleNamespace(
        model=toy.model, attn_backend=mamba, device=DEVICE, decode_cuda_graph_runner=None,
        model_config=SimpleNamespace(vocab_size=st.VOCAB, context_len=512),
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token, mamba_pool=mamba_pool),
        server_args=SimpleNamespace(attention_backend="triton"))
    target_worker = SimpleNamespace(model_runner=model_runner, forward_batch_generation=target.forward_batch_generation,
                                    device=DEVICE)
    w = object.__new__(cls)
    attrs = dict(
        worker_attrs(toy, block, hybrid),
        _target_worker=target_worker, target_worker=target_worker, model_runner=model_runner,
        draft_model=draft_kv.model, ps=SimpleNamespace(tp_rank=0),
    )
    return finish_worker(w, attrs, cls_name, N, toy, loader,
                         record=record, events=events, mod=mod, spec=spec)


def finish_worker(w, attrs, cls_name, N, toy, loader, **env):
    """The worker ``w`` given ``attrs`` (and, a DDTreeWorker, its own DDTREE state as its
    ``__init__`` sets it), the batch its first draft input (the prompts' last tokens as the
    bonus); returns (w, env): the toy environment's parts and ``env``."""
    import torch

    for k, v in attrs.items():
        object.__setattr__(w, k, v)
    if cls_name == "DDTreeWorker":
        w._init_ddtree(SimpleNamespace(speculative_ddtree_budget=N - 1, speculative_num_draft_tokens=N))
    common = loader.load(f"{SPEC}.draft_worker_common")
    batch = toy.batch
    batch.spec_info = common.make_draft_input_v2(
        bonus_tokens=torch.tensor([r.tokens()[-1] for r in toy.reqs], dtype=torch.int64), new_seq_lens=batch.seq_lens)
    return w, SimpleNamespace(allocator=toy.allocator, batch=batch, reqs=toy.reqs, req_to_token=toy.req_to_token,
                              draft_kv=toy.draft_kv, target=toy.target, drafter=toy.drafter, mamba=toy.mamba,
                              loader=loader, **env)


def load_with_fakes(loader, fakes, *modules):
    """``fakes`` (standins.kernel_fakes and the probe's own) for the stand-ins and for
    ``sgl_kernel``'s sampling kernels, then ``modules`` loaded; every name of ``fakes`` a loaded
    real module took from a stand-in is replaced by its fake.  Returns the first module."""
    import sys
    import types

    loader.set_fakes(fakes)
    sgl_kernel = types.ModuleType("sgl_kernel")
    for name in ("tree_speculative_sampling_target_only", "top_k_renorm_prob", "top_p_renorm_prob"):
        setattr(sgl_kernel, name, fakes[name])
    sys.modules["sgl_kernel"] = sgl_kernel
    loaded_modules = [loader.load(m) for m in modules]
    for m, loaded in list(sys.modules.items()):
        if not m.startswith("sglang.") or loader.is_stub(loaded):
            continue
        for name, fake in fakes.items():
            if name in loaded.__dict__ and loader.is_stub(loaded.__dict__[name]):
                setattr(loaded, name, fake)
    return loaded_modules[0]


def toy_env(prompts, block, truth_rank, seed, events, req=None):
    """The requests, the batch (its prompts' KV, every token but the bonus, in the target
    cache), the toy drafter and target, the drafter's KV and the Mamba backend of a decode
    step's stand-ins (standins.py); ``req`` makes a request of a prompt (standins.Req)."""
    import torch

    from tests.ddtree_integration import standins as st

    reqs = [(req or st.Req)(p) for p in prompts]
    req_to_token = torch.full((len(reqs), 512), -1, dtype=torch.int64)
    allocator = st.Allocator()
    batch = st.Batch(reqs, req_to_token, allocator)
    batch.device = DEVICE
    for b, r in enumerate(reqs):  # the prefill's KV: every prompt token but the bonus
        n = r.kv_committed_len
        req_to_token[b, :n] = allocator.alloc(n)
        for p_, (slot, tok) in enumerate(zip(req_to_token[b, :n].tolist(), r.tokens()[:n])):
            allocator.kv[int(slot)] = (int(tok), p_)
    batch_ref = [batch]
    drafter = st.OracleDrafter(batch_ref, block, truth_rank, seed)
    draft_kv = st.DraftKV(events)
    drafter.token_to_kv_pool = draft_kv.pool
    embed = torch.nn.Embedding(st.VOCAB, 4)
    lm_head = SimpleNamespace(
        weight=torch.eye(st.VOCAB),
        shard_indices=SimpleNamespace(num_org_elements=st.VOCAB, num_org_elements_padded=st.VOCAB,
                                      num_added_elements=0, org_vocab_start_index=0,
                                      added_vocab_start_index=st.VOCAB),
    )
    return SimpleNamespace(reqs=reqs, req_to_token=req_to_token, allocator=allocator, batch=batch, drafter=drafter,
                           draft_kv=draft_kv, target=st.ToyTarget(batch_ref, allocator), mamba=st.MambaBackend(),
                           model=SimpleNamespace(get_input_embeddings=lambda: embed, lm_head=lm_head))


def worker_attrs(toy, block, hybrid) -> dict:
    """What a spec-v2 DFlash worker's ``__init__`` sets that its decode step reads (the
    draft block's buffers at the batch's capacity; the host one a host tensor), for an
    instance made without it."""
    import torch

    from tests.ddtree_integration import standins as st

    cap = len(toy.reqs)
    return dict(
        server_args=SimpleNamespace(), draft_model_runner=toy.drafter, page_size=1, block_size=block,
        speculative_num_draft_tokens=block, device=DEVICE, draft_window_size=None, use_compact_draft_cache=False,
        _mask_token_id=st.VOCAB - 1, _block_pos_offsets=torch.arange(block, dtype=torch.int64),
        _draft_sampler=None, _need_mamba_verify_commit=hybrid,
        _warned_sampling_fallback=False, _logged_first_verify=True,
        _draft_block_spec_info=SimpleNamespace(draft_token_num=block),
        _draft_block_ids_buf=torch.empty((cap, block), dtype=torch.long),
        _draft_block_positions_buf=torch.empty((cap, block), dtype=torch.int64),
        _draft_block_tokens_buf=torch.empty((cap, block), dtype=torch.long),
        _draft_verify_out_cache_loc_buf=torch.empty((cap, block), dtype=torch.int64),
        _draft_block_end_buf=torch.empty((cap,), dtype=torch.int32),
        _draft_seq_lens_cpu_buf=st.host(torch.empty((cap,), dtype=torch.int32)),
        _use_fused_kv_materialize=False, _fused_kv_helper=None,
        _use_triton_prepare_block=False, _use_triton_accept_bonus=False, _use_triton_compact_rebuild=False,
        _accept_bonus_buffer_cap=0, _accept_bonus_buffer_slot=0, _accept_len_buf=None, _commit_lens_bufs=[],
        _bonus_id_bufs=[], _out_tokens_bufs=[], _new_seq_lens_bufs=[],
        _draft_greedy_gathered_max_buf=None, _draft_greedy_gathered_ids_buf=None, _draft_greedy_gather_cap=0,
        _draft_greedy_local_max_buf=None, _draft_greedy_local_arg_buf=None, _draft_greedy_local_cap=0,
        _draft_greedy_best_rank_buf=None, _draft_greedy_rank_index_buf=None,
        _draft_greedy_selected_ids_buf=None, _draft_greedy_index_cap=0,
    )


def _t(x):
    return {"dtype": str(x.dtype), "shape": list(x.shape), "values": x.tolist()}


def _schedule(env, overlap: bool, reservation: str = "reserved_seq_lens_cpu") -> None:
    """What the scheduler does before a spec-v2 decode step: the overlap
    scheduler's KV reservation (the tree's own DFlashDraftInputV2.prepare_for_decode;
    its host bound is the field ``reservation``: v0.5.23 names it ``nxt_kv_lens_cpu``),
    and the host mirror of the sequence lengths (exact, or none for backends on the
    GPU-only path, where the worker takes the reservation's bound)."""
    from tests.ddtree_integration import standins as st

    batch = env.batch
    batch.forward_mode = st.ForwardMode.DECODE
    batch.spec_info.prepare_for_decode(batch)
    setattr(batch.spec_info, reservation, st.host(getattr(batch.spec_info, reservation)))
    batch.seq_lens_cpu = st.host(batch.seq_lens_cpu) if not overlap else None
    if overlap:
        batch.seq_lens_sum = None


def _apply(env, res) -> dict:
    """What the output processor and the overlap relay do with the result."""
    from tests.ddtree_integration import standins as st

    batch = env.batch
    stride = res.speculative_num_draft_tokens
    accept = res.accept_lens.tolist()
    toks = res.next_token_ids.tolist()
    for i, req in enumerate(env.reqs):
        new = toks[i * stride: i * stride + accept[i]]
        req.output_ids.extend(new)
        req.kv_committed_len += accept[i]
    batch.seq_lens = res.new_seq_lens.clone()
    batch.seq_lens_cpu = st.host(res.new_seq_lens.clone())
    batch.seq_lens_sum = int(res.new_seq_lens.sum())
    batch.spec_info = res.next_draft_input
    return {"stride": stride, "accept_lens": accept}


def _replay_draft_graphs(w, env, mod, block: int, budget: int, padding: int, capture_bs=None) -> None:
    """The drafter's forward as a CUDA-graph replay with the tree's draft head
    folded in: the head the worker builds for the graphs (DDTreeDraftHead) runs as
    the graph's capture-tail hook does, over the replayed batch (the real requests
    and ``padding`` padded rows of noise), and the forward reports a graph run
    without hidden states, so a step that built its tree from them would fail.
    ``capture_bs``: the sizes the graph runner captured, as the worker's capture hook
    notes them on the head (the replayed size must be the smallest that holds the batch)."""
    import torch

    from tests.ddtree_integration import standins as st

    head = mod.DDTreeDraftHead(weight=w.target_worker.model_runner.model.lm_head.weight, num_org=st.VOCAB,
                               org_vocab_start=0, block_size=block, budget=budget,
                               max_bs=len(env.reqs) + padding)
    if capture_bs is not None:
        head.capture_bs = tuple(capture_bs)
    object.__setattr__(w, "_draft_sampler", head)
    eager = env.drafter.forward
    noise = torch.Generator().manual_seed(99)

    def replay(forward_batch):
        out = eager(forward_batch)
        hidden = out.logits_output.hidden_states
        pad = torch.randn((padding * block, hidden.shape[1]), generator=noise, dtype=hidden.dtype)
        head(torch.cat([hidden, pad]), forward_batch.input_ids)
        return SimpleNamespace(logits_output=SimpleNamespace(hidden_states=None), can_run_graph=True)

    env.drafter.forward = replay


def _interpreted_verify_kernels(root: str):
    """The tree's ddtree_triton.py itself, its kernels in Triton's interpreter (the loader would
    give an inert stand-in for a module it was not told to load: the worker's lazy import). The
    probe's interpreter must start with TRITON_INTERPRET=1: triton's own jit functions (tl.sum)
    are decorated when triton is first imported."""
    import importlib.util
    import os
    import sys

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("fused_verify needs the probe started with TRITON_INTERPRET=1")
    path = Path(root).joinpath(*SPEC.split("."), "ddtree_triton.py")
    spec = importlib.util.spec_from_file_location(f"{SPEC}.ddtree_triton", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def ddtree_decode_steps(root: str, prompts, block=5, budget=6, steps=3, truth_rank=(0, 1, 0, 2), seed=0,
                        sampling=False, overlap=True, hybrid=True, draft_graph_padding=None,
                        fused_verify=False) -> dict:
    """DDTREE decode steps (draft, tree, verify, commit) through the worker's real
    forward_batch_generation on the stand-ins, each under the sync counter; returns
    what each step fed the kernels and what it committed.  ``draft_graph_padding``
    (a number of padded rows): the drafter runs as CUDA-graph replays with the
    tree's draft head in the graph (``_replay_draft_graphs``).  ``fused_verify``: the
    verify input from the tree's one kernel (ddtree_triton), run by Triton's
    interpreter, as a CUDA worker whose start-up check passed uses it."""
    N = budget + 1
    w, env = _worker_setup(root, f"{SPEC}.ddtree_worker", "DDTreeWorker", prompts, block, list(truth_rank), seed, N,
                           hybrid=hybrid)
    if draft_graph_padding is not None:
        _replay_draft_graphs(w, env, env.mod, block, budget, int(draft_graph_padding))
    decode_options(w, env, root, prompts, fused_verify, sampling)
    out = []
    for _ in range(steps):
        _schedule(env, overlap)
        out.append(decode_step(w, env, root, reserved=env.batch.spec_info.reserved_seq_lens_cpu.tolist()))
    return {"steps": out, "prompts": prompts}


def decode_options(w, env, root, prompts, fused_verify, sampling) -> None:
    """``fused_verify``: the worker builds its verify input with the tree's one kernel
    (ddtree_triton in Triton's interpreter), as a CUDA worker whose start-up check passed
    does; ``sampling``: the batch samples at temperature 1."""
    import sys

    from tests.ddtree_integration import standins as st

    if fused_verify:
        assert w.fused_verify is False, "a CPU worker keeps the torch path at start-up"
        sys.modules[f"{SPEC}.ddtree_tree"]._TRITON = _interpreted_verify_kernels(root)
        w.fused_verify = True
    if sampling:
        env.batch.sampling_info = st.Sampled(len(prompts))


def decode_step(w, env, root, reserved) -> dict:
    """One decode step of the worker ``w`` (the scheduler's work before it done), under the
    sync counter: what it fed the kernels and what it committed (``reserved``: the
    overlap scheduler's reservation the step ran with)."""
    from tests.ddtree_integration.syncs import SyncCounter

    batch = env.batch
    seq_before = batch.seq_lens.tolist()
    outputs_before = [list(r.output_ids) for r in env.reqs]
    r2t_before = env.req_to_token.clone()
    n_slots, n_moves, n_commits = len(env.draft_kv.slots), len(env.allocator.moves), len(env.mamba.commits)
    published = []
    env.events.clear()

    def on_publish(new_seq_lens):
        env.events.append("publish")
        published.append(new_seq_lens.tolist())

    with SyncCounter(root) as counter:
        res = w.forward_batch_generation(batch, on_publish=on_publish)
    events = list(env.events)
    applied = _apply(env, res)
    call = env.target.calls[-1]
    vi = call["spec_info"]
    k = env.record[-1]
    return {
        "verify_input": {
            "mro": [c.__name__ for c in type(vi).__mro__],
            "draft_token": _t(vi.draft_token), "positions": _t(vi.positions),
            "retrieve_index": _t(vi.retrieve_index), "retrieve_next_token": _t(vi.retrieve_next_token),
            "retrieve_next_sibling": _t(vi.retrieve_next_sibling),
            "custom_mask": _t(vi.custom_mask),
            "spec_steps": vi.spec_steps, "topk": vi.topk, "draft_token_num": vi.draft_token_num,
            "max_tree_depth": vi.max_tree_depth, "capture_hidden_mode": str(vi.capture_hidden_mode),
        },
        "forward_batch_type": call["forward_batch_type"],
        "attn_init": env.mamba.inits[-1] if env.mamba.inits else None,
        "kernel": {"accept_index": _t(k["accept_index"]), "accept_token_num": _t(k["accept_token_num"]),
                   "predicts": _t(k["predicts"]), "sampling": k.get("sampling", False),
                   "draft_probs_all_zero": k.get("draft_probs_all_zero"),
                   "thresholds": [k.get("threshold_single"), k.get("threshold_acc")]},
        "draft_block": env.drafter.blocks[-1],
        "verify_slots": call["out_cache_loc"].tolist(),
        "seq_before": seq_before,
        "reserved": reserved,
        "seq_after": env.batch.seq_lens.tolist(),
        "published": published,
        "events": events,
        "applied": applied,
        "outputs_before": outputs_before,
        "outputs_after": [list(r.output_ids) for r in env.reqs],
        "req_to_token_before": r2t_before[:, :128].tolist(),
        "req_to_token": env.req_to_token[:, :128].tolist(),
        "target_kv": {str(s): list(v) for s, v in env.allocator.kv.items()},
        "moves": env.allocator.moves[n_moves:],
        "mamba_commit": env.mamba.commits[n_commits:],
        "draft_kv": {str(s): v for s, v in list(env.draft_kv.slots.items())[n_slots:]},
        "spec_info_after": type(env.batch.spec_info).__name__,
        "bonus_after": env.batch.spec_info.bonus_tokens.tolist(),
        "syncs": counter.syncs,
    }


def each_config(run, root: str, prompts, configs) -> list:
    """``run(root, prompts, **cfg)`` for several configurations in one interpreter, each
    one's failure a result."""
    out = []
    for cfg in configs:
        try:
            out.append({"ok": True, "value": run(root, prompts, **cfg)})
        except Exception as e:  # noqa: BLE001
            import traceback

            out.append({"ok": False, "type": type(e).__name__, "message": str(e),
                        "traceback": traceback.format_exc()[-3000:]})
    return out


def ddtree_decode_configs(root: str, prompts, configs) -> list:
    """ddtree_decode_steps for several configurations in one interpreter."""
    return each_config(ddtree_decode_steps, root, prompts, configs)


def ddtree_chain_steps(root: str, prompts, schedule, block=5, budget=6, truth_rank=(0, 1), seed=0, overlap=False,
                       draft_graph_padding=None, capture_bs=None, adaptive=None) -> dict:
    """DDTREE decode steps with ``--speculative-ddtree-chain-batch`` set per step
    from ``schedule`` (None: unset), through the worker's real
    forward_batch_generation: the tree's and the chain's verify paths are two
    stand-in target backends (``VerifyPath``, no graphs); each step records which
    backend the target ran its verify and Mamba commit on, and what it verified
    and committed (the fields ``dflash_chain_steps`` records).

    ``adaptive`` (``{"seconds": {"tree": s, "chain": s}, "run_steps", "min_samples",
    "explore_every"}``): ``--speculative-ddtree-adaptive`` instead (the schedule's
    entries are ignored, its length is the steps): the worker's own AdaptiveSteps
    on a clock that each step advances by its kind's seconds, its accept lengths
    read back into host buffers (a real server's pinned memory)."""
    N = budget + 1
    w, env = _worker_setup(root, f"{SPEC}.ddtree_worker", "DDTreeWorker", prompts, block, list(truth_rank), seed, N)
    return chain_schedule_steps(w, env, root, schedule, block, budget, lambda: _schedule(env, overlap),
                                draft_graph_padding, capture_bs, adaptive)


def chain_schedule_steps(w, env, root, schedule, block, budget, scheduler, draft_graph_padding=None, capture_bs=None,
                         adaptive=None) -> dict:
    """ddtree_chain_steps' steps on a worker ``w`` set up by a release's probe (``scheduler()``:
    that release's scheduling before a step)."""
    from tests.ddtree_integration import standins as st
    from tests.ddtree_integration.syncs import SyncCounter

    if draft_graph_padding is not None:
        _replay_draft_graphs(w, env, env.mod, block, budget, int(draft_graph_padding), capture_bs)
    algo = env.loader.load(f"{SPEC}.ddtree_algo")
    mr = w.target_worker.model_runner
    backends = {"tree": env.mamba, "chain": st.MambaBackend()}
    paths = {algo.StepVerify.TREE: env.mod.VerifyPath(backends["tree"], None),
             algo.StepVerify.CHAIN: env.mod.VerifyPath(backends["chain"], None)}
    object.__setattr__(w, "_verify_paths", paths)
    name_of = {id(b): k for k, b in backends.items()}
    seen = []
    verify = w.target_worker.forward_batch_generation

    def target_forward(*a, **kw):
        seen.append(name_of.get(id(mr.attn_backend)))
        return verify(*a, **kw)

    w.target_worker.forward_batch_generation = target_forward
    out = []
    import torch

    head = w._draft_sampler
    if adaptive is not None:
        ad = env.loader.load(f"{SPEC}.ddtree_adaptive")
        clock = [0.0]
        choice = ad.AdaptiveVerify(**{k: adaptive[k] for k in ("run_steps", "min_samples", "explore_every")})
        done = SimpleNamespace(record=lambda: None, query=lambda: True)   # the copy's CUDA event, completed
        readback = ad.AcceptReadback(64, "cuda", host_buffer=lambda n: st.host(torch.zeros(n, dtype=torch.int64)),
                                     event=lambda: done)
        object.__setattr__(w, "adaptive", ad.AdaptiveSteps(choice=choice, readback=readback, clock=lambda: clock[0]))
        schedule = [None] * len(schedule)
    for chain_batch in schedule:
        object.__setattr__(w, "chain_batch", chain_batch)
        if head is not None:
            head.chain_batch = chain_batch       # a server's one flag, here per step
            tree_before = {k: v.clone() for k, v in head.buffers.items()}
        scheduler()
        seq_before = env.batch.seq_lens.tolist()
        commits = {k: len(b.commits) for k, b in backends.items()}
        with SyncCounter(root) as counter:
            res = w.forward_batch_generation(env.batch)
        if adaptive is not None:
            clock[0] += adaptive["seconds"][w.adaptive.last.kind.value]
        call = env.target.calls[-1]
        applied = _apply(env, res)
        vi = call["spec_info"]
        out.append({"chain_batch": chain_batch, "verify_on": seen[-1],
                    "measured": None if adaptive is None else
                    [[m.kind.value, m.batch_size, m.seconds, m.tokens] for m in w.adaptive.measured],
                    "verify_input": type(vi).__name__, "draft_token_num": vi.draft_token_num,
                    "draft_token": vi.draft_token.tolist(), "positions": vi.positions.tolist(),
                    "verify_slots": call["out_cache_loc"].tolist(), "seq_before": seq_before,
                    "req_to_token": env.req_to_token[:, :64].tolist(),
                    "commits_on": {k: len(b.commits) - commits[k] for k, b in backends.items()},
                    "applied": applied, "outputs_after": [list(r.output_ids) for r in env.reqs],
                    "head_built_tree": None if head is None else
                    any(not torch.equal(v, tree_before[k]) for k, v in head.buffers.items()),
                    "syncs": counter.syncs})
    return {"steps": out}


def chain_graph_sizes(root: str, cases) -> list:
    """ddtree_algo.chain_graph_sizes for each (capture_bs, chain_batch), sorted lists."""
    _, loader = _install(root, WORKER_MODULES)
    algo = loader.load(f"{SPEC}.ddtree_algo")
    return [sorted(algo.chain_graph_sizes(bs, cb)) for bs, cb in cases]


def dflash_chain_steps(root: str, prompts, block=5, steps=2, seed=0, compact_window=None) -> dict:
    """DFLASH's own spec-v2 decode steps (DFlashWorkerV2.forward_batch_generation) on
    the same stand-ins: the chain it verifies, what it commits, and the syncs of
    each step (with ``compact_window``: the draft's sliding-window view rebuilt on
    the eager path, which reads lengths on the host)."""
    w, env = _worker_setup(root, f"{SPEC}.dflash_worker_v2", "DFlashWorkerV2", prompts, block, [0, 1], seed, block)
    if compact_window is not None:
        w.draft_window_size, w.use_compact_draft_cache = int(compact_window), True
        w.draft_model_runner.req_to_token_pool = SimpleNamespace(req_to_token=env.req_to_token.clone())
    return chain_steps(w, env, root, steps, lambda: _schedule(env, overlap=False))


def chain_steps(w, env, root, steps, schedule, kv=False) -> dict:
    """``steps`` decode steps of a DFLASH worker (``schedule()`` before each): the chain each
    verifies, what it commits (``kv``: the target's and the drafter's KV too), the syncs."""
    from tests.ddtree_integration.syncs import SyncCounter

    out = []
    for _ in range(steps):
        schedule()
        seq_before = env.batch.seq_lens.tolist()
        with SyncCounter(root) as counter:
            res = w.forward_batch_generation(env.batch)
        call = env.target.calls[-1]
        applied = _apply(env, res)
        out.append({"draft_token": call["spec_info"].draft_token.tolist(),
                    "positions": call["spec_info"].positions.tolist(),
                    "verify_slots": call["out_cache_loc"].tolist(), "seq_before": seq_before,
                    "applied": applied, "outputs_after": [list(r.output_ids) for r in env.reqs],
                    "syncs": counter.syncs})
        if kv:
            out[-1].update(draft_kv=dict(sorted((str(k), v) for k, v in env.draft_kv.slots.items())),
                           target_kv={str(s): list(v) for s, v in env.allocator.kv.items()})
    return {"steps": out, "has_run_draft_block": any("_run_draft_block" in vars(c) for c in type(w).__mro__)}


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
        mod.get_tp_group = lambda: world  # v0.5.17's worker; v0.5.23's asks get_parallel() for it
        mod.get_parallel = lambda: SimpleNamespace(tp_group=world)
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


def tp_topk_many(root: str, tps) -> list:
    return [tp_topk(root, tp=tp) for tp in tps]


def worker_init(root: str, block=16, budget=63) -> dict:
    """DDTreeWorker.__init__ with DFlashWorkerV2.__init__ (which loads the drafter
    on the GPU through a TpModelWorker) stood in by a recorder of the server
    arguments it sees: the drafter must be built as DFlash's (N = block, topk 1),
    the target's arguments restored afterwards (N = budget + 1, topk 2), through
    ServerArgs.override (the resolved arguments are read-only); arguments that
    skipped DDTREE's rules are refused."""
    _, loader = _install(root, WORKER_MODULES)
    mod = loader.load(f"{SPEC}.ddtree_worker")
    seen = {}

    def dflash_init(self, server_args, **kw):
        seen.update(num_draft_tokens=server_args.speculative_num_draft_tokens,
                    topk=server_args.speculative_eagle_topk, kwargs=sorted(kw))
        self.block_size = int(server_args.speculative_num_draft_tokens)
        self.ps = kw["ps"]

    mod.DFlashWorkerV2.__init__ = dflash_init

    class Args(SimpleNamespace):
        """ServerArgs after resolution: fields change only through override()."""

        def __init__(self, **kw):
            object.__setattr__(self, "overrides", [])
            for k, v in kw.items():
                object.__setattr__(self, k, v)

        def __setattr__(self, name, value):
            raise AttributeError(f"server_args.{name} assigned after resolution")

        def override(self, source, **fields):
            self.overrides.append(source)
            for k, v in fields.items():
                object.__setattr__(self, k, v)

    sa = Args(speculative_dflash_block_size=block, speculative_ddtree_budget=budget,
              speculative_num_draft_tokens=budget + 1, speculative_eagle_topk=2)
    def construct():  # the class's base derives from a stand-in: its metaclass would absorb a call
        w = object.__new__(mod.DDTreeWorker)
        mod.DDTreeWorker.__init__(w, sa, 0, SimpleNamespace(tp_rank=0), 12345, SimpleNamespace())
        return w

    w = construct()
    out = {"seen": seen, "after": [sa.speculative_num_draft_tokens, sa.speculative_eagle_topk],
           "overrides": list(sa.overrides),
           "worker": [w.block_size, w.budget, w.num_verify_tokens, w.num_draft_positions]}
    out["draft_head"] = _draft_head_choices(mod, w)
    sa.override("test", speculative_num_draft_tokens=16)  # arguments that skipped finish_ddtree_server_args
    try:
        construct()
        out["unfinished"] = None
    except RuntimeError as e:
        out["unfinished"] = str(e)
    return out

def _draft_head_choices(mod, w) -> dict:
    """What DDTreeWorker._maybe_build_draft_sampler builds (the head DFlash's graph
    capture folds into the draft graphs) for: one TP rank; two; DFlash's switch to
    an eager draft head; a quantized LM head; added (LoRA) vocabulary."""
    import torch

    V, H = 50, 8
    shard = dict(num_org_elements=V, org_vocab_start_index=0, num_added_elements=0)
    flags = {"eager": False}
    mod.envs = SimpleNamespace(SGLANG_DFLASH_EAGER_DRAFT_SAMPLER=SimpleNamespace(get=lambda: flags["eager"]))
    mod.get_exec = lambda: SimpleNamespace(graph=SimpleNamespace(
        cuda_graph_config=SimpleNamespace(decode=SimpleNamespace(bs=[1, 2, 4, 8, 24]))))

    def choose(tp=1, weight=None, **shard_over):
        mod.get_tp_group = lambda: SimpleNamespace(world_size=tp)
        lm_head = SimpleNamespace(weight=torch.randn(V, H) if weight is None else weight,
                                  shard_indices=SimpleNamespace(**dict(shard, **shard_over)))
        object.__setattr__(w, "target_worker", SimpleNamespace(
            model_runner=SimpleNamespace(model=SimpleNamespace(lm_head=lm_head))))
        head = w._maybe_build_draft_sampler()
        if head is None:
            return None
        return {"type": type(head).__name__, "max_bs": head.max_bs, "budget": head.budget,
                "block": head.block_size, "num_org": head.num_org,
                "buffers": {k: [list(v.shape), str(v.dtype)] for k, v in head.buffers.items()}}

    out = {"tp1": choose(), "tp2": choose(tp=2),
           "quantized": choose(weight=torch.zeros(V, H, dtype=torch.int8)), "added_vocab": choose(num_added_elements=4)}
    flags["eager"] = True
    out["eager_switch"] = choose()
    return out


def _mamba_slot(req_pool_indices):
    """The stand-in request pool's map from request to Mamba state slot (request + 1)."""
    return req_pool_indices.int() + 1


def _linear_backend(hyb, server_args, device="cpu"):
    """The tree's real ``MambaAttnBackendBase`` on CPU over the stand-in request pool."""
    backend = object.__new__(hyb.MambaAttnBackendBase)
    pool = SimpleNamespace(get_mamba_indices=_mamba_slot, translate_mamba_indices=lambda x: x, mamba_pool=None)
    hyb.MambaAttnBackendBase.__init__(backend, SimpleNamespace(
        server_args=SimpleNamespace(enable_unified_memory=False, **vars(server_args)), device=device,
        is_draft_worker=False, req_to_token_pool=pool, token_to_kv_pool=None))
    return backend


def linear_metadata(md) -> dict:
    """The tree fields of the hybrid backend's ``ForwardMetadata``."""
    return {
        "query_start_loc": md.query_start_loc.tolist(),
        "retrieve_next_token": None if md.retrieve_next_token is None else md.retrieve_next_token.tolist(),
        "retrieve_next_sibling": None if md.retrieve_next_sibling is None else md.retrieve_next_sibling.tolist(),
        "retrieve_parent_token": None if md.retrieve_parent_token is None
        else {"dtype": str(md.retrieve_parent_token.dtype), "shape": list(md.retrieve_parent_token.shape)},
    }


def ddtree_verify_metadata(loader, metadata, bs, block, budget) -> dict:
    """``metadata`` (the backend's TARGET_VERIFY metadata of a verify input) of a DDTree verify
    input built by the tree's worker (a random draft's tree), with whether the backend passes
    its LCRS arrays through as they are; a failure is the result."""
    import torch

    from tests.ddtree_integration import standins as st

    try:
        worker = loader.load(f"{SPEC}.ddtree_worker")
        tree_mod = loader.load(f"{SPEC}.ddtree_tree")
        g = torch.Generator().manual_seed(0)
        ids, lps = tree_mod.topk_logprobs(torch.randn((bs, block - 1, st.VOCAB), generator=g), budget)
        tree = tree_mod.build_ddtree(ids, lps, budget)
        seq = torch.tensor([5, 9][:bs], dtype=torch.int64)
        vi = worker.make_verify_input(tree, torch.tensor([1, 2][:bs]), seq, int(seq.sum()), block - 1)
        md = metadata(vi)
        md["same_arrays"] = (md["retrieve_next_token"] == vi.retrieve_next_token.tolist()
                             and md["retrieve_next_sibling"] == vi.retrieve_next_sibling.tolist())
        return {"ok": True, "value": md}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "type": type(e).__name__, "message": str(e)}


def hybrid_verify_metadata(root: str, bs=2, budget=7, block=4, topk=2) -> dict:
    """The hybrid linear-attention backend's TARGET_VERIFY metadata (the tree
    path that makes its conv / GDN / Mamba kernels follow each node's parent),
    for (a) the verify input the model runner's warm-up builds for a
    DFlash-drafted algorithm (``spec_info.create_dummy_verify_input``) and
    (b) a DDTree verify input."""
    import torch

    from tests.ddtree_integration import standins as st

    _, loader = _install(root, [
        "sglang.srt.layers.attention.hybrid_linear_attn_backend",
        "sglang.srt.layers.attention.mamba.mamba2_metadata",
    ] + WORKER_MODULES)
    loader.set_fakes({"ForwardMode": st.ForwardMode})
    hyb = loader.load("sglang.srt.layers.attention.hybrid_linear_attn_backend")
    spec_info = loader.load(f"{SPEC}.spec_info")
    N = budget + 1
    backend = _linear_backend(hyb, SimpleNamespace(speculative_eagle_topk=topk))

    def metadata(info):
        fb = SimpleNamespace(batch_size=bs, forward_mode=st.ForwardMode.TARGET_VERIFY,
                             input_ids=torch.zeros(bs * N, dtype=torch.int64), spec_info=info,
                             req_pool_indices=torch.arange(bs), mamba_track_indices=None, mamba_track_mask=None,
                             _original_batch_size=None, seq_lens_cpu=None)
        return linear_metadata(backend._forward_metadata(fb))

    out = {"topk": backend.topk}
    # (a) the dummy-run verify input of a DFlash-family algorithm (base_runner's warm-up)
    algo = spec_info.SpeculativeAlgorithm.from_string("DFLASH")
    warmup = spec_info.create_dummy_verify_input(algo, SimpleNamespace(speculative_num_draft_tokens=N), None, N, False)
    out["warmup_type"] = type(warmup).__name__
    try:
        out["warmup"] = {"ok": True, "value": metadata(warmup)}
    except Exception as e:  # noqa: BLE001
        out["warmup"] = {"ok": False, "type": type(e).__name__, "message": str(e)}
    # (b) a DDTree verify input
    out["ddtree"] = ddtree_verify_metadata(loader, metadata, bs, block, budget)
    return out


GRAPH_MODULES = WORKER_MODULES + [
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
    "sglang.srt.layers.attention.hybrid_linear_attn_backend",
    "sglang.srt.layers.attention.mamba.mamba2_metadata",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.verify_mask",
]


def _chain_path(worker, Runner, runner, describe, target_args, spec_bag, context_log, block, max_bs) -> dict:
    """``ddtree_worker.build_chain_verify`` on a stand-in target model runner: the
    values its new attention backend and graph runner are built under, and the
    input that runner's capture (the real ``get_spec_info``) verifies with."""
    seen = {}
    mr = runner("TritonAttnBackend", False, block).model_runner
    mr.init_new_workspace = False
    mr.decode_cuda_graph_runner = object()  # the target has decode CUDA graphs
    args = mr.server_args = SimpleNamespace(**vars(target_args))

    def values():
        return {"spec_bag": [spec_bag.speculative_num_draft_tokens, spec_bag.speculative_eagle_topk],
                "server_args": [args.speculative_num_draft_tokens, args.speculative_eagle_topk]}

    def get_backend(init_new_workspace=False):
        mr.init_new_workspace = init_new_workspace
        seen["backend"] = dict(values(), init_new_workspace=init_new_workspace)
        return type("TritonAttnBackend", (), {})()

    mr._get_attention_backend = get_backend
    real_init = Runner.__init__

    def capture(self, model_runner, *, attn_backend=None, speculative_num_steps=None, speculative_num_draft_tokens=None):
        template = runner("TritonAttnBackend", False, int(speculative_num_draft_tokens))
        self.__dict__.update({**template.__dict__, "model_runner": model_runner, "attn_backend": attn_backend})
        seen["runner"] = dict(values(), width=speculative_num_draft_tokens,
                              verifies_chain=getattr(self, "verifies_chain", None),
                              own_backend=attn_backend is not model_runner.attn_backend,
                              capture=describe(self, self.get_spec_info(max_bs * self.captured_req_width)))

    Runner.__init__ = capture
    try:
        path = worker.build_chain_verify(mr, block)
    finally:
        Runner.__init__ = real_init
    return dict(seen, after=values(), init_new_workspace_after=mr.init_new_workspace,
                runner_is_built=path.graph_runner is not None and path.graph_runner is not mr.decode_cuda_graph_runner,
                overrides=[src for src, _ in context_log])


class SpecContext:
    """``runtime_context.get_context()``: the published spec bag ``bag`` and its override,
    which ``log`` records (source, fields)."""

    def __init__(self, bag, log=None):
        self.bag, self.log = bag, [] if log is None else log

    def is_config_namespace_published(self, name):
        return name == "spec"

    def config_bag(self, name):
        assert name == "spec", name
        return self.bag

    def override(self, source, **fields):
        self.log.append([source, dict(fields)])
        for k, v in fields.items():
            setattr(self.bag, k, v)


def capture_runner(Runner, algo, backend_name, is_draft, width, num_draft_tokens, max_bs, server_args):
    """A ``DecodeCudaGraphRunner`` made without its GPU ``__init__``: what ``get_spec_info``
    reads (the model runner's algorithm, role and backend class, the widths, the static mask)."""
    import torch

    r = object.__new__(Runner)
    r.__dict__.update(
        model_runner=SimpleNamespace(spec_algorithm=algo, is_draft_worker=is_draft, server_args=server_args,
                                     attn_backend=type(backend_name, (), {})()),
        speculative_num_steps=1, speculative_num_draft_tokens=num_draft_tokens, captured_req_width=width,
        ragged_verify_mode=None,
        buffers=SimpleNamespace(custom_mask=torch.ones((max_bs + max_bs * width) * width, dtype=torch.bool)))
    return r


def describe_capture(r, info, eagle_info) -> dict:
    """The verify input a graph runner ``r`` captures with."""
    from tests.ddtree_integration import standins as st

    return {
        "type": type(info).__name__,
        "tree_input": isinstance(info, eagle_info.EagleVerifyInput),
        "static_mask": info.custom_mask is not None and info.custom_mask is r.buffers.custom_mask,
        "draft_token_num": info.draft_token_num,
        "topk": getattr(info, "topk", None),
        "spec_steps": getattr(info, "spec_steps", None),
        "capture_hidden_mode": st.CaptureHiddenMode(info.capture_hidden_mode).name,
    }


def graph_verify(root: str, budget=7, block=4, seq_lens=(9, 1, 5), capture_bs=(1, 4), vocab=64) -> dict:
    """DDTREE's target verify through the tree's real CUDA-graph code, on CPU:

    (a) ``DecodeCudaGraphRunner.get_spec_info``: the verify input the target's
        graphs are captured with, for a triton and a flashinfer target backend
        (named by class, which is what DFlash's mask policy reads), and the drafter's;
    (b) the real ``TritonAttnBackend``'s graph buffers for a DDTree verify replayed
        at a captured batch size (``_update_target_verify_buffers``, which replay's
        ``init_forward_metadata_out_graph`` runs): the step's FULL_MASK copied into
        its static verify mask, ``mask_indptr`` and ``qo_indptr``;
    (c) the real ``MambaAttnBackendBase`` (the hybrid models' linear layers) at the
        same replay (``_replay_metadata``, padding = bs - the verify's requests, as
        the graph runner passes it): the tree's LCRS arrays in its static buffers,
        the Mamba slots of the real requests and -1 for the padded rows.

    Only the Triton kernels that fill kv_indices are stand-ins (absorbed)."""
    import torch

    from tests.ddtree_integration import standins as st

    _, loader = _install(root, GRAPH_MODULES)
    spec_bag = SimpleNamespace(speculative_num_draft_tokens=budget + 1, speculative_num_steps=1, speculative_eagle_topk=2)
    context_log = []

    context = SpecContext(spec_bag, context_log)
    loader.set_fakes({"ForwardMode": st.ForwardMode, "CaptureHiddenMode": st.CaptureHiddenMode,
                      "get_spec": lambda: spec_bag, "get_context": lambda: context})
    dcgr = loader.load("sglang.srt.model_executor.runner.decode_cuda_graph_runner")
    hyb = loader.load("sglang.srt.layers.attention.hybrid_linear_attn_backend")
    tri = loader.load("sglang.srt.layers.attention.triton_backend")
    vmask = loader.load("sglang.srt.layers.attention.verify_mask")
    spec_mod = loader.load(f"{SPEC}.spec_info")
    algo = spec_mod.SpeculativeAlgorithm.from_string("DDTREE")
    eagle_info = loader.load(f"{SPEC}.eagle_info")
    worker = loader.load(f"{SPEC}.ddtree_worker")
    tree_mod = loader.load(f"{SPEC}.ddtree_tree")
    Runner = dcgr.DecodeCudaGraphRunner
    N = budget + 1
    max_bs = max(capture_bs)
    target_args = SimpleNamespace(speculative_ddtree_budget=budget, speculative_dflash_block_size=block,
                                  speculative_num_draft_tokens=N, speculative_eagle_topk=2, speculative_num_steps=1)
    draft_args = SimpleNamespace(**{**vars(target_args), "speculative_num_draft_tokens": block,
                                    "speculative_eagle_topk": 1})

    def runner(backend_name, is_draft, width):
        return capture_runner(Runner, algo, backend_name, is_draft, width, N, max_bs,
                              draft_args if is_draft else target_args)

    def describe(r, info):
        return describe_capture(r, info, eagle_info)

    out = {"capture": {}}
    for name in ("TritonAttnBackend", "FlashInferAttnBackend"):
        r = runner(name, False, N)
        out["capture"][name] = describe(r, Runner.get_spec_info(r, max_bs * N))
    r = runner("TritonAttnBackend", True, block)
    out["capture"]["drafter"] = describe(r, Runner.get_spec_info(r, max_bs * block))
    # a target runner whose verify width is not budget + 1 (server arguments that skipped DDTREE's rules)
    r = runner("TritonAttnBackend", False, block)
    try:
        Runner.get_spec_info(r, max_bs * block)
        out["capture"]["wrong_width"] = None
    except RuntimeError as e:
        out["capture"]["wrong_width"] = str(e)

    # the chain steps' verify path (--speculative-ddtree-chain-batch): built as DFLASH's
    out["chain_path"] = _chain_path(worker, Runner, runner, describe, target_args, spec_bag, context_log, block, max_bs)

    # ---- one DDTree verify step at replay, padded to a captured bs
    raw_bs = len(seq_lens)
    bs = min(b for b in capture_bs if b >= raw_bs)
    gen = torch.Generator().manual_seed(0)
    ids, lps = tree_mod.topk_logprobs(torch.randn((raw_bs, block - 1, vocab), generator=gen), budget)
    tree = tree_mod.build_ddtree(ids, lps, budget)
    seq = torch.tensor(seq_lens, dtype=torch.int64)
    vi = worker.make_verify_input(tree, torch.arange(raw_bs) + 1, seq, int(seq.sum()), block - 1)
    fill = 1  # the graph runner's seq_len fill value for padded rows
    seq_pad = torch.cat([seq, torch.full((bs - raw_bs,), fill, dtype=torch.int64)])
    req_pool_indices = torch.tensor([3, 5, 6, 2, 7][:raw_bs] + [0] * (bs - raw_bs), dtype=torch.int64)

    ctx = 64
    full = object.__new__(tri.TritonAttnBackend)
    full.__dict__.update(
        device="cpu", num_draft_tokens=N, max_context_len=ctx, sliding_window_size=None,
        qo_indptr=torch.zeros(max_bs + 1, dtype=torch.int32), mask_indptr=torch.zeros(max_bs + 1, dtype=torch.int64),
        cuda_graph_kv_indices=torch.zeros(max_bs * N * ctx, dtype=torch.int64), window_kv_indptr=None,
        _verify_mask=vmask.maybe_create_verify_mask(is_draft_runner=False, skip_prefill=False, max_bs=max_bs,
                                                    max_context_len=ctx, num_draft_tokens=N, device="cpu",
                                                    is_read=True, dtype=torch.uint8))
    full._fill_kv_indptr_and_indices = lambda bs_, seq_lens_, rpi, kv_indices: torch.zeros(bs_ + 1, dtype=torch.int32)
    qo, _, custom_mask, mask_indptr, *_ = tri.TritonAttnBackend._update_target_verify_buffers(
        full, bs, seq_pad, req_pool_indices, vi)
    mask = vi.custom_mask.to(torch.uint8)
    seq_mask_len = N * (seq_pad + N)
    out["triton"] = {
        "static_mask": custom_mask is not None and custom_mask.data_ptr() == full._verify_mask.buffer.data_ptr(),
        "mask": custom_mask[:mask.numel()].tolist() == mask.tolist(),
        "mask_indptr": mask_indptr[1:raw_bs + 1].tolist() == torch.cumsum(seq_mask_len, 0)[:raw_bs].tolist(),
        "qo_indptr": qo.tolist(),
        "mode": full._verify_mask.mode.name,
    }

    linear = _linear_backend(hyb, target_args)
    linear.init_cuda_graph_state(max_bs, max_bs * N)
    fm = linear._replay_metadata(bs, req_pool_indices.clone(), st.ForwardMode.TARGET_VERIFY, vi, seq_pad.clone(),
                                 num_padding=bs - raw_bs)
    out["hybrid"] = {
        "next_token": linear.retrieve_next_token_list[bs - 1][:raw_bs].tolist() == vi.retrieve_next_token.tolist(),
        "next_sibling": linear.retrieve_next_sibling_list[bs - 1][:raw_bs].tolist() == vi.retrieve_next_sibling.tolist(),
        "metadata_static": fm.retrieve_next_token is linear.retrieve_next_token_list[bs - 1]
        and fm.retrieve_parent_token is linear.retrieve_parent_token_list[bs - 1],
        "state_indices": fm.mamba_cache_indices.tolist(),
        "expected_state_indices": _mamba_slot(req_pool_indices[:raw_bs]).tolist() + [-1] * (bs - raw_bs),
        "query_start_loc": fm.query_start_loc.tolist(),
    }
    return out
