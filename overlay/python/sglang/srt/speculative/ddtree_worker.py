"""DDTREE worker: DFlash's drafter, a DDTree, and EAGLE's tree verify (sgl-overlay).

``DDTreeWorker`` is a ``DFlashWorkerV2``: the spec-v2 worker that the scheduler
drives with the overlap scheduler (the default) or synchronously
(``--disable-overlap-schedule``). Prefill and idle batches are DFlash's. One
decode step, with no host synchronisation (every length, index and token stays
on the device; the host only reads sizes it already has, ``batch.seq_lens_cpu``
or the overlap scheduler's reserved bound):

1. ``DFlashWorkerV2._run_draft_block`` (DFlash's own draft forward): the drafter
   over [bonus, MASK x (block - 1)] at positions prefix .. prefix + block - 1.
2. The per-position log-probabilities of the L = block - 1 drafted positions
   over the full vocabulary (the target's vocab-parallel LM head; with tensor
   parallelism the ranks' top-K and log-sum-exp are gathered and merged, so
   every rank builds the same tree), then the best-first tree of ``budget``
   nodes (``ddtree_tree.build_ddtree``, static shapes). With one TP rank and the
   drafter's CUDA graphs, both run inside the draft graph (``DDTreeDraftHead``,
   as DFlash folds its greedy head in), so a replayed step launches none of
   their kernels from the host.
3. Verify inputs in SGLang's tree layout (``ddtree_tree.build_verify_inputs``;
   tokens, positions and mask in one Triton kernel where the start-up check
   ``fused_verify_check`` passed) as a ``DDTreeVerifyInput`` (EAGLE's tree-verify input): N = budget + 1 tokens
   per request in the request's verify slots req_to_token[prefix .. prefix + N)
   (reserved by ``DFlashDraftInputV2.prepare_for_decode``, which reads
   speculative_num_draft_tokens = N), positions prefix + depth, the FULL_MASK
   custom mask and the LCRS arrays; at a CUDA-graph replay the graph runner and
   the attention backends copy them into the graph's static buffers (tokens,
   positions; triton's verify mask; the hybrid backend's LCRS buffers).
4. The target verify (CUDA graph or eager), then EAGLE's acceptance
   (``eagle_sample``: ``verify_tree_greedy`` at temperature 0,
   ``tree_speculative_sampling_target_only`` otherwise, with no draft
   probabilities: lossless); device-side accept lengths (bonus included) and the
   accepted path's node indices, L + 1 wide.
5. Commit, as EAGLE's spec-v2 tree commit does: the Mamba / GDN state of the
   **last accepted node** (``commit_mamba_states_after_verify``), the accepted
   path's target KV moved to the front of the verify slots
   (``move_accept_tokens_to_target_kvcache``), the new sequence lengths published
   to the overlap scheduler, and the path's target features, in path order,
   written into the drafter's KV at positions prefix .. prefix + m
   (DFlash's prefix-valid append).

With ``--speculative-ddtree-chain-batch K``, a step of K requests or more is
DFlash's own decode step instead (``DFlashWorkerV2.forward_batch_generation``:
the drafter's greedy chain, block size tokens a request, DFlash's verify,
acceptance and Mamba commit), on a second target attention backend and set of
verify CUDA graphs built as DFLASH builds its own (``ChainVerify``); the step
switches the target's backend and graph runner to the path it verifies
(``ddtree_algo.step_verify``, from the batch size the host holds). With
``--speculative-ddtree-adaptive`` the same two paths, each step taking the one
that has committed more tokens a second at its batch size on this server
(``ddtree_adaptive``: the steps' periods on the host's clock, their accept
lengths read back without a wait).

What is refused at start-up is in ``ddtree_algo.py``.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
from sglang.srt.distributed import get_tp_group
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.environ import envs
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.runtime_context import get_context, get_exec
from sglang.srt.speculative.ddtree_adaptive import AcceptReadback, AdaptiveSteps, AdaptiveVerify
from sglang.srt.speculative.ddtree_algo import StepVerify, chain_graph_sizes, step_verify
from sglang.srt.speculative.ddtree_tree import (
    TREE_MODE_TOPK,
    DDTree,
    ancestor_mask,
    build_ddtree,
    build_verify_inputs,
    fused_verify_check,
    topk_logprobs,
    tree_verify_arrays,
)
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_utils import eagle_sample
from sglang.srt.speculative.spec_utils import commit_mamba_states_after_verify, move_accept_tokens_to_target_kvcache

logger = logging.getLogger(__name__)

# --speculative-ddtree-adaptive: the largest batch whose accept lengths are read back (a larger
# step is not measured), and how often (measured steps) the choice is logged.
ADAPTIVE_READBACK_BS = 4096
ADAPTIVE_LOG_EVERY = 1000


@dataclass
class DDTreeVerifyInput(EagleVerifyInput):
    """EAGLE's tree-verify input, holding one DDTree per request.

    ``spec_steps`` is L (the drafter's positions), so EAGLE's ``max_tree_depth``
    (the accept width) is L + 1: the longest path a tree of depth <= L accepts."""

    def prepare_for_verify(self, batch: ScheduleBatch, target_worker):
        """The verify forward batch, with the CUDA graph's buffers (or the eager
        attention metadata) prepared: DFlash's packaging of a TARGET_VERIFY
        forward (``DFlashVerifyInput.prepare_for_verify``), which reads only
        ``draft_token`` and ``capture_hidden_mode`` of the input."""
        return DFlashVerifyInput.prepare_for_verify(self, batch, target_worker)


def _free_gpu_bytes(device) -> int:
    """Free memory of the device (0 on a CPU: nothing to report)."""
    if torch.device(device).type != "cuda":
        return 0
    return int(torch.cuda.mem_get_info(torch.device(device))[0])


def shard_logits(hidden: torch.Tensor, weight: torch.Tensor, num_org: int) -> torch.Tensor:
    """The drafted positions' logits [bs, L, num_org] over one vocabulary shard (all
    of it with one TP rank), in the LM head's dtype: ``hidden`` [bs, L, H] through
    the head's first ``num_org`` rows."""
    bs, L, H = hidden.shape
    return torch.matmul(hidden.reshape(-1, H).to(weight.dtype), weight[:num_org].T).view(bs, L, num_org)


def local_topk_logprobs(hidden: torch.Tensor, weight: torch.Tensor, num_org: int, k: int):
    """Top-K token ids (of the shard's own vocabulary, from 0) and log-probabilities
    of ``shard_logits``; the top-K reads the logits in float32."""
    return topk_logprobs(shard_logits(hidden, weight, num_org), k)


class DDTreeDraftHead:
    """DDTREE's draft head inside the drafter's CUDA graph (one TP rank).

    The capture-tail hook of the draft graphs (``make_draft_sampler_capture_hook``,
    the one DFlash's greedy head uses) calls it with the draft forward's hidden
    states: the drafted positions' top-K over the target's LM head and the
    best-first tree are computed there and copied into static buffers of the
    largest captured batch, which a replayed step reads (``replayed``). A step
    that runs the drafter eagerly (a batch above the captured sizes) builds the
    same tree on the host's launch (``DDTreeWorker._draft_tree``). The buffers
    hold every field the verify input reads (the ancestor mask and the LCRS
    arrays too, which the torch builder leaves to later), and ``out``, the
    drafted positions' top-1 tokens: the greedy chain a chain step
    (``--speculative-ddtree-chain-batch``) reads where DFlash reads its own
    head's ``out``. A graph whose every replay is a chain step (``chain_batch``
    and the runner's captured sizes, ``capture_bs``, which the worker's capture
    hook notes before this head runs: ``ddtree_algo.chain_graph_sizes``) computes
    that chain only: the top-1 of the same top-K code, no tree."""

    def __init__(self, *, weight, num_org: int, org_vocab_start: int, block_size: int, budget: int, max_bs: int,
                 chain_batch: Optional[int] = None):
        self.chain_batch = chain_batch
        self.capture_bs: Optional[Tuple[int, ...]] = None  # the graph runner's sizes, noted at capture
        self.weight = weight
        self.num_org = int(num_org)
        self.org_vocab_start = int(org_vocab_start)
        self.block_size = int(block_size)
        self.budget = int(budget)
        self.max_bs = int(max_bs)
        N, dev = self.budget + 1, weight.device
        i64 = dict(dtype=torch.int64, device=dev)
        self.buffers = dict(
            tokens=torch.zeros((self.max_bs, N), **i64),
            depths=torch.zeros((self.max_bs, N), **i64),
            parents=torch.zeros((self.max_bs, N), **i64),
            ranks=torch.zeros((self.max_bs, N), **i64),
            scores=torch.zeros((self.max_bs, N), dtype=torch.float64, device=dev),
            valid=torch.zeros((self.max_bs, N), dtype=torch.bool, device=dev),
            num_nodes=torch.zeros((self.max_bs,), **i64),
            ancestor=torch.zeros((self.max_bs, N, N), dtype=torch.bool, device=dev),
            next_token=torch.zeros((self.max_bs, N), **i64),
            next_sibling=torch.zeros((self.max_bs, N), **i64),
        )
        self.out = torch.zeros((self.max_bs * (self.block_size - 1),), **i64)

    def tree_of(self, hidden: torch.Tensor) -> Tuple[torch.Tensor, DDTree]:
        """The greedy chain [bs, L] (each drafted position's top-1 token) and the
        tree of the drafter's hidden states [bs, block, H] (position 0, the bonus
        token's, is not drafted), with every verify field filled."""
        ids, lps = local_topk_logprobs(hidden[:, 1:, :], self.weight, self.num_org, self.budget)
        ids = ids + self.org_vocab_start
        tree = build_ddtree(ids, lps, self.budget)
        if tree.ancestor is None:
            tree.ancestor = ancestor_mask(tree)
        if tree.next_token is None or tree.next_sibling is None:
            _, tree.next_token, tree.next_sibling = tree_verify_arrays(tree)
        return ids[:, :, 0], tree

    def __call__(self, hidden_states: torch.Tensor, input_ids=None) -> None:
        """The capture-tail hook: hidden_states [bs * block, H] of a captured batch size."""
        bs = hidden_states.shape[0] // self.block_size
        if bs > self.max_bs:
            raise RuntimeError(
                f"DDTREE: a draft CUDA graph of batch {bs} is captured above the draft head's "
                f"{self.max_bs} (sglang/srt/speculative/ddtree_worker.py). Start with "
                "SGLANG_DFLASH_EAGER_DRAFT_SAMPLER=1 (the tree built eagerly) and report this."
            )
        hidden = hidden_states.view(bs, self.block_size, -1)
        if self.capture_bs is not None and bs in chain_graph_sizes(self.capture_bs, self.chain_batch):
            ids, _ = local_topk_logprobs(hidden[:, 1:, :], self.weight, self.num_org, 1)
            chain = ids[:, :, 0] + self.org_vocab_start
        else:
            chain, tree = self.tree_of(hidden)
            for name, buf in self.buffers.items():
                buf[:bs].copy_(getattr(tree, name))
        self.out[: chain.numel()].copy_(chain.reshape(-1))

    def replayed(self, bs: int) -> DDTree:
        """The tree the last replay of a draft graph of batch >= bs computed, for its first bs requests."""
        return DDTree(max_depth=self.block_size - 1, **{k: v[:bs] for k, v in self.buffers.items()})


def make_verify_input(
    tree,
    root_tokens: torch.Tensor,
    prefix_lens: torch.Tensor,
    host_prefix_sum: int,
    num_draft_positions: int,
    fused: bool = False,
) -> DDTreeVerifyInput:
    """The verify input of a batch of trees.

    Per request N = budget + 1 verify tokens (root = the bonus token at
    position prefix, nodes at prefix + depth). The flat FULL_MASK's blocks
    start at offsets computed on the device from ``prefix_lens``;
    ``host_prefix_sum``, a host-side upper bound of ``prefix_lens.sum()``, only
    sizes it (no device read). The attention backend reads it as it is (eager)
    or copies it into its static verify buffer at a CUDA-graph replay (triton:
    ``_update_target_verify_buffers``; flashinfer plans each replay with it).
    ``fused``: tokens, positions and mask from one kernel (``ddtree_triton``), where the
    worker's start-up check passed; else the torch operations."""
    vi = build_verify_inputs(tree, root_tokens, prefix_lens, prefix_lens_sum=int(host_prefix_sum), fused=fused)
    return DDTreeVerifyInput(
        draft_token=vi.draft_token,
        custom_mask=vi.custom_mask,
        positions=vi.positions,
        retrieve_index=vi.retrive_index,
        retrieve_next_token=vi.retrive_next_token,
        retrieve_next_sibling=vi.retrive_next_sibling,
        retrieve_cum_len=None,
        spec_steps=int(num_draft_positions),
        topk=TREE_MODE_TOPK,
        draft_token_num=int(tree.tokens.shape[1]),
        capture_hidden_mode=CaptureHiddenMode.FULL,
        seq_lens_sum=int(host_prefix_sum),
        seq_lens_cpu=None,
    )


def graph_capture_verify_input(server_args, num_tokens_per_req: int, custom_mask: torch.Tensor) -> DDTreeVerifyInput:
    """The verify input the target's CUDA graphs are captured with (called by
    ``DecodeCudaGraphRunner.get_spec_info`` for DDTREE's target; the drafter's
    graphs stay DFlash's).

    It is EAGLE's tree-verify capture input (the EAGLE branch of
    ``get_spec_info``) with DDTREE's values: N = budget + 1 tokens per request,
    topk 2 and a custom mask, so that the attention backends capture their
    custom-mask path (flashinfer's wrappers get a mask buffer; triton's kernel
    reads its static verify mask), which replay fills from each step's tree
    (``make_verify_input``). The hybrid linear-attention backend captures its
    static LCRS buffers in tree mode from ``speculative_eagle_topk`` alone and
    copies the tree's arrays into them at replay."""
    num_verify_tokens = int(server_args.speculative_ddtree_budget) + 1
    if int(num_tokens_per_req) != num_verify_tokens:
        raise RuntimeError(
            f"DDTREE: the target's CUDA graphs would be captured with {num_tokens_per_req} tokens per "
            f"request, but the tree verifies budget + 1 = {num_verify_tokens} "
            "(sglang/srt/speculative/ddtree_worker.py); the server arguments did not go through "
            "ddtree_algo.finish_ddtree_server_args. Start with --disable-cuda-graph and report this."
        )
    return DDTreeVerifyInput(
        draft_token=None,
        custom_mask=custom_mask,
        positions=None,
        retrieve_index=None,
        retrieve_next_token=None,
        retrieve_next_sibling=None,
        retrieve_cum_len=None,
        spec_steps=int(server_args.speculative_dflash_block_size) - 1,
        topk=TREE_MODE_TOPK,
        draft_token_num=num_verify_tokens,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        seq_lens_sum=None,
        seq_lens_cpu=None,
    )


def _override(server_args, source: str, **fields) -> None:
    """Set fields of the (resolved, read-only) server arguments through their one
    mutation point, ``ServerArgs.override``."""
    override = getattr(server_args, "override", None)
    if override is not None:
        override(source, **fields)
    else:  # a plain namespace (tests)
        for k, v in fields.items():
            setattr(server_args, k, v)


@contextmanager
def _as_dflash_drafter(server_args, block_size: int):
    """DFlash's worker reads its block size from ``speculative_num_draft_tokens``,
    and its draft worker is built from a copy of the server arguments (whose
    values the draft model runner's buffers, CUDA graphs and warm-up read); for
    DDTREE that field holds the tree's verify width, so the drafter is built with
    the block size in it and topk 1, as for DFLASH; the target's values come back after."""
    saved = dict(
        speculative_num_draft_tokens=server_args.speculative_num_draft_tokens,
        speculative_eagle_topk=server_args.speculative_eagle_topk,
    )
    _override(server_args, "ddtree.drafter", speculative_num_draft_tokens=int(block_size), speculative_eagle_topk=1)
    try:
        yield
    finally:
        _override(server_args, "ddtree.target", **saved)


@contextmanager
def _as_dflash_target(server_args, block_size: int):
    """The target's verify as DFLASH configures it (verify width = the block,
    topk 1), for building the chain steps' attention backend and graphs: the
    backends read these values at construction, from the server arguments (the
    hybrid linear-attention backend's tree mode) and from the runtime's spec bag
    (triton's verify width); both come back after."""
    fields = dict(speculative_num_draft_tokens=int(block_size), speculative_eagle_topk=1)
    with _as_dflash_drafter(server_args, block_size):
        context = get_context()
        saved = {k: getattr(context.config_bag("spec"), k) for k in fields}
        context.override("ddtree.chain_verify", **fields)
        try:
            yield
        finally:
            context.override("ddtree.tree_verify", **saved)


@dataclass(frozen=True)
class VerifyPath:
    """The target's attention backend and decode graph runner for one kind of
    step (``StepVerify``); the graph runner is None without CUDA graphs."""

    attn_backend: Any
    graph_runner: Any


def build_chain_verify(model_runner, block_size: int) -> VerifyPath:
    """The chain steps' verify path on the target: a new attention backend and,
    when the target has decode CUDA graphs, a second ``DecodeCudaGraphRunner``
    marked ``verifies_chain`` (its ``get_spec_info`` takes DFlash's branch: the
    chain input at the block's width), as upstream's adaptive EAGLE builds one
    per step count (eagle_worker_v2.build_adaptive_runtime_state)."""
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    saved_workspace = getattr(model_runner, "init_new_workspace", False)
    with _as_dflash_target(model_runner.server_args, block_size):
        try:
            backend = model_runner._get_attention_backend(init_new_workspace=True)
        finally:
            model_runner.init_new_workspace = saved_workspace
        runner = None
        if model_runner.decode_cuda_graph_runner is not None:
            runner = DecodeCudaGraphRunner.__new__(DecodeCudaGraphRunner)
            runner.verifies_chain = True  # read during capture, which __init__ runs
            runner.__init__(
                model_runner,
                attn_backend=backend,
                speculative_num_steps=1,
                speculative_num_draft_tokens=int(block_size),
            )
    return VerifyPath(attn_backend=backend, graph_runner=runner)


class DDTreeWorker(DFlashWorkerV2):
    """DDTree speculative decoding worker (spec-v2; overlap or not; tp >= 1, pp = 1, page size 1)."""

    def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
        block_size = int(server_args.speculative_dflash_block_size)
        with _as_dflash_drafter(server_args, block_size):
            super().__init__(
                server_args=server_args,
                gpu_id=gpu_id,
                ps=ps,
                nccl_port=nccl_port,
                target_worker=target_worker,
            )
        self._init_ddtree(server_args)

    def _init_ddtree(self, server_args) -> None:
        self.budget = int(server_args.speculative_ddtree_budget)
        self.num_verify_tokens = self.budget + 1
        self.num_draft_positions = int(self.block_size) - 1
        chain_batch = getattr(server_args, "speculative_ddtree_chain_batch", None)
        self.chain_batch: Optional[int] = None if chain_batch is None else int(chain_batch)
        self.adaptive: Optional[AdaptiveSteps] = None
        self._adaptive_logged = 0
        self._verify_paths: Dict[StepVerify, VerifyPath] = {}
        if self.num_verify_tokens != int(server_args.speculative_num_draft_tokens):
            raise RuntimeError(
                f"DDTREE: speculative_num_draft_tokens is {server_args.speculative_num_draft_tokens}, "
                f"expected budget + 1 = {self.num_verify_tokens}; the server arguments did not go "
                "through ddtree_algo.finish_ddtree_server_args (sglang/srt/speculative/ddtree_algo.py)."
            )
        device = vars(self).get("device")  # DFlashWorkerV2.__init__ sets it (the target's device)
        why = ("not CUDA" if device is None or torch.device(device).type != "cuda"
               else fused_verify_check(device, self.budget, self.num_draft_positions))
        self.fused_verify = why is None
        if getattr(server_args, "speculative_ddtree_adaptive", False):
            self.adaptive = AdaptiveSteps(
                choice=AdaptiveVerify(),
                readback=AcceptReadback(ADAPTIVE_READBACK_BS, "cpu" if device is None else device),
                clock=time.perf_counter,
            )
        if self.ps.tp_rank == 0:
            logger.info(
                "DDTREE worker: block %d, %d draft positions, budget %d, %d verify tokens per request; "
                "verify input %s.",
                self.block_size,
                self.num_draft_positions,
                self.budget,
                self.num_verify_tokens,
                "in one kernel" if why is None else f"by torch operations ({why})",
            )

    def init_cuda_graphs(self):
        """DFlash's (the drafter's graphs, the draft head); then, with
        ``--speculative-ddtree-chain-batch`` or ``--speculative-ddtree-adaptive``, the chain
        steps' verify path beside the tree's (the target's own backend and graphs, captured
        before this)."""
        super().init_cuda_graphs()
        if self.chain_batch is None and self.adaptive is None:
            return
        mr = self.target_worker.model_runner
        self._verify_paths[StepVerify.TREE] = VerifyPath(mr.attn_backend, mr.decode_cuda_graph_runner)
        free_before = _free_gpu_bytes(self.device)
        self._verify_paths[StepVerify.CHAIN] = build_chain_verify(mr, int(self.block_size))
        if self.ps.tp_rank == 0:
            logger.info(
                "DDTREE chain verify path built (%s; %s; %.2f GiB).",
                "chosen per step" if self.adaptive is not None else f"steps of {self.chain_batch} requests or more",
                "CUDA graphs" if self._verify_paths[StepVerify.CHAIN].graph_runner is not None else "eager",
                (free_before - _free_gpu_bytes(self.device)) / 2**30,
            )

    def _step_kind(self, batch_size: int) -> StepVerify:
        """What this decode step verifies: the adaptive choice, else the chain-batch rule."""
        if self.adaptive is None:
            return step_verify(batch_size, self.chain_batch)
        kind = self.adaptive.begin(batch_size)
        measured = len(self.adaptive.measured)
        if self.ps.tp_rank == 0 and measured >= self._adaptive_logged + ADAPTIVE_LOG_EVERY:
            self._adaptive_logged = measured
            logger.info("DDTREE adaptive verify after %d measured steps: %s", measured,
                        self.adaptive.choice.describe())
        return kind

    def _use_verify_path(self, kind: StepVerify) -> None:
        """Point the target at the backend and graphs of the step's verify."""
        path = self._verify_paths.get(kind)
        if path is None:
            return
        mr = self.target_worker.model_runner
        mr.attn_backend = path.attn_backend
        mr.decode_cuda_graph_runner = path.graph_runner

    def _maybe_build_draft_sampler(self):
        """DFlash folds its greedy draft head into the draft CUDA graph; DDTREE folds
        its tree head (``DDTreeDraftHead``) in the same way, where it can: one TP
        rank (the ranks' top-K merge stays eager), a floating-point LM head without
        added vocabulary. Otherwise None: the tree is built eagerly."""

        def eager(reason):
            if self.ps.tp_rank == 0:
                logger.info("DDTREE draft tree built eagerly (reason=%s).", reason)
            return None

        if envs.SGLANG_DFLASH_EAGER_DRAFT_SAMPLER.get():
            return eager("SGLANG_DFLASH_EAGER_DRAFT_SAMPLER=1")
        lm_head = getattr(self.target_worker.model_runner.model, "lm_head", None)
        if lm_head is None or not hasattr(lm_head, "weight") or not hasattr(lm_head, "shard_indices"):
            return eager("no target lm_head with shard indices")
        if not torch.is_floating_point(lm_head.weight):
            return eager("quantized lm_head")
        if int(get_tp_group().world_size) != 1:
            return eager("tp>1")
        shard = lm_head.shard_indices
        if int(shard.num_added_elements) != 0:
            return eager("added vocab")
        if self.ps.tp_rank == 0:
            logger.info("DDTREE draft top-K and tree folded into the draft cuda graph.")
        head = DDTreeDraftHead(
            weight=lm_head.weight,
            num_org=int(shard.num_org_elements),
            org_vocab_start=int(shard.org_vocab_start_index),
            block_size=int(self.block_size),
            budget=self.budget,
            max_bs=max(get_exec().graph.cuda_graph_config.decode.bs),
            chain_batch=self.chain_batch,
        )
        if self.chain_batch is not None:
            # DFlash appends the head's capture hook after this returns; this one runs before it
            # at each capture and notes the sizes the runner captures (its filtered list).
            def note_capture_sizes(runner, out, forward_batch, num_tokens):
                head.capture_bs = tuple(int(b) for b in runner.capture_bs)

            self.draft_model_runner.capture_tail_hooks.append(note_capture_sizes)
        return head

    def _draft_tree(self, draft) -> DDTree:
        """The step's tree: from the draft head's buffers after a graph replay, else
        built here from the drafter's hidden states."""
        if self._draft_sampler is not None and draft.draft_out.can_run_graph:
            return self._draft_sampler.replayed(draft.bs)
        draft_hidden = draft.draft_out.logits_output.hidden_states
        if draft_hidden is None:
            raise RuntimeError("DDTREE: the DFlash draft model returned no hidden states.")
        draft_hidden = draft_hidden.view(draft.bs, int(self.block_size), -1)
        ids, logprobs = self._draft_topk_logprobs(draft_hidden[:, 1:, :], draft.lm_head)
        return build_ddtree(ids, logprobs, self.budget)

    # ------------------------------------------------------------------ draft
    def _draft_topk_logprobs(self, hidden: torch.Tensor, lm_head) -> Tuple[torch.Tensor, torch.Tensor]:
        """Per-position top-K (K = min(budget, V)) token ids and log-probabilities
        over the full vocabulary, from the drafter's hidden states [bs, L, H].

        Identical on every TP rank: each rank's top-K logits and log-sum-exp over
        its vocabulary shard are all-gathered; the global top-K lies in the union
        of the local ones and the global log-sum-exp is the log-sum-exp of the local ones."""
        shard = lm_head.shard_indices
        if int(shard.num_added_elements) > 0:
            raise RuntimeError(
                "DDTREE: the target's LM head has added (LoRA) vocabulary; the tree's "
                "top-K covers the base vocabulary only (sglang/srt/speculative/ddtree_worker.py). "
                "Serve without added vocabulary."
            )
        weight = lm_head.weight
        num_org = int(shard.num_org_elements)
        org_start = int(shard.org_vocab_start_index)
        tp_group = get_tp_group()
        tp_size = int(tp_group.world_size)
        if tp_size == 1:
            ids, lps = local_topk_logprobs(hidden, weight, num_org, self.budget)
            return ids + org_start, lps
        bs, L, _ = hidden.shape
        logits = shard_logits(hidden, weight, num_org).float()
        k = min(self.budget, int(self.model_runner.model_config.vocab_size))
        kl = min(k, num_org)
        vals, idx = torch.topk(logits, kl, dim=-1)
        if kl < k:  # a short last shard: pad with candidates that are never chosen
            pad = (0, k - kl)
            vals = torch.nn.functional.pad(vals, pad, value=float("-inf"))
            idx = torch.nn.functional.pad(idx, pad, value=0)
        lse = torch.logsumexp(logits, dim=-1)
        g_vals = torch.empty((tp_size,) + vals.shape, dtype=vals.dtype, device=vals.device)
        g_ids = torch.empty((tp_size,) + idx.shape, dtype=torch.int64, device=idx.device)
        g_lse = torch.empty((tp_size,) + lse.shape, dtype=lse.dtype, device=lse.device)
        tp_group.all_gather_into_tensor(g_vals.view(-1), vals.contiguous().view(-1))
        tp_group.all_gather_into_tensor(g_ids.view(-1), (idx + org_start).contiguous().view(-1))
        tp_group.all_gather_into_tensor(g_lse.view(-1), lse.contiguous().view(-1))
        cand_vals = g_vals.permute(1, 2, 0, 3).reshape(bs, L, tp_size * k)
        cand_ids = g_ids.permute(1, 2, 0, 3).reshape(bs, L, tp_size * k)
        glse = torch.logsumexp(g_lse, dim=0)
        top_vals, pos = torch.topk(cand_vals, k, dim=-1)
        return torch.gather(cand_ids, -1, pos), top_vals - glse.unsqueeze(-1)

    def _host_prefix_bound(self, batch: ScheduleBatch, draft_input: DFlashDraftInputV2) -> int:
        """A host-side upper bound of the batch's committed prefix lengths' sum,
        from what the host already holds (no device read): the scheduler's
        ``seq_lens_sum`` mirror, or the overlap reservation's bound when the
        backends take the GPU-only path (``needs_cpu_seq_lens`` False); never
        above batch size x context length (no prefix is longer)."""
        ceiling = int(batch.batch_size()) * int(self.target_worker.model_runner.model_config.context_len)
        if batch.seq_lens_cpu is not None:
            return min(int(batch.seq_lens_cpu.sum()), ceiling)
        if draft_input.reserved_seq_lens_sum is not None:
            return min(int(draft_input.reserved_seq_lens_sum), ceiling)
        return ceiling

    # ----------------------------------------------------------------- decode
    def forward_batch_generation(self, batch: ScheduleBatch, on_publish=None, grammar_barrier=None) -> GenerationBatchResult:
        if getattr(batch, "return_logprob", False):
            raise ValueError("DDTREE speculative decoding does not support return_logprob.")
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch or batch.forward_mode.is_idle():
            # Prefill (the prompt's features fill the draft KV) and idle batches: DFlash's.
            if self.adaptive is not None:
                self.adaptive.interrupted()  # the decode step before it is not measured
            return super().forward_batch_generation(batch, on_publish=on_publish, grammar_barrier=grammar_barrier)
        if batch.spec_info is None:
            batch.spec_info = DFlashDraftInputV2.create_idle_input(device=self.device)
        draft_input = batch.spec_info
        if not isinstance(draft_input, DFlashDraftInputV2):
            raise RuntimeError(
                "DDTREE decode requires DFlashDraftInputV2 state on the running batch "
                f"(got {type(draft_input).__name__}); the request did not complete prefill."
            )
        if batch.has_grammar:
            raise RuntimeError(
                "Invariant broken: DDTREE batch has grammar constraints; the server starts with "
                "--grammar-backend none and the scheduler refuses grammar requests."
            )
        self._validate_phase1_sampling_support(batch)

        kind = self._step_kind(batch.batch_size())
        self._use_verify_path(kind)
        if kind is StepVerify.CHAIN:
            # DFlash's own decode step (draft, greedy chain, verify, accept, commit).
            result = super().forward_batch_generation(batch, on_publish=on_publish, grammar_barrier=grammar_barrier)
            if self.adaptive is not None:
                self.adaptive.committed(result.accept_lens)
            return result

        # --- 1) DFlash's draft forward, 2) the tree.
        draft = self._run_draft_block(batch, draft_input)
        bs = draft.bs
        tree = self._draft_tree(draft)

        # --- 3) The verify input, in the request's verify slots.
        N = self.num_verify_tokens
        prefix_lens = batch.seq_lens
        host_prefix_sum = self._host_prefix_bound(batch, draft_input)
        target_runner = self.target_worker.model_runner
        verify_input = make_verify_input(
            tree,
            root_tokens=draft.block_ids[:, 0],
            prefix_lens=prefix_lens,
            host_prefix_sum=host_prefix_sum,
            num_draft_positions=self.num_draft_positions,
            fused=self.fused_verify,
        )
        batch.out_cache_loc = assign_extend_cache_locs_func(
            req_pool_indices=batch.req_pool_indices,
            req_to_token=target_runner.req_to_token_pool.req_to_token,
            start_offset=prefix_lens,
            end_offset=prefix_lens + N,
            batch_size=bs,
            draft_token_num=N,
            device=self.device,
        )
        # Host bounds for the backends' planning (committed prefix + the verify
        # tokens), as DFlash's verify sets them; restored after the preparation.
        seq_lens_cpu_backup, seq_lens_sum_backup = batch.seq_lens_cpu, batch.seq_lens_sum
        if seq_lens_cpu_backup is not None:
            batch.seq_lens_cpu = seq_lens_cpu_backup + N
            batch.seq_lens_sum = host_prefix_sum + bs * N
        elif draft_input.reserved_seq_lens_cpu is not None:
            batch.seq_lens_cpu = draft_input.reserved_seq_lens_cpu
            batch.seq_lens_sum = int(draft_input.reserved_seq_lens_sum)
        verify_forward_batch, _ = verify_input.prepare_for_verify(batch, self.target_worker)
        batch.seq_lens_cpu, batch.seq_lens_sum = seq_lens_cpu_backup, seq_lens_sum_backup

        # --- 4) Target verify, acceptance on the device.
        target_out = self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )
        logits_output = target_out.logits_output
        if logits_output.hidden_states is None:
            raise RuntimeError(
                "DDTREE verify needs the target's DFlash context features (CaptureHiddenMode.FULL), got None."
            )
        predict, accept_lens, accept_index = eagle_sample(verify_input, batch, logits_output)
        if self.adaptive is not None:
            self.adaptive.committed(accept_lens)

        # --- 5) Commit: SSM state of the last accepted node, KV to the front, lengths.
        commit_mamba_states_after_verify(self.target_worker, batch, accept_lens, accept_index, N)
        move_accept_tokens_to_target_kvcache(batch, accept_index, accept_lens - 1, batch.token_to_kv_pool_allocator)
        new_seq_lens = prefix_lens + accept_lens.to(prefix_lens.dtype)
        if on_publish is not None:
            on_publish(new_seq_lens)

        path = accept_index.to(torch.int64).clamp(min=0)  # [bs, L + 1]; -1 past the accept length
        out_tokens = predict.to(torch.int64)[path]  # committed tokens, bonus last; stride L + 1
        bonus = out_tokens.gather(1, (accept_lens.to(torch.int64) - 1).view(bs, 1)).view(bs)
        hidden = logits_output.hidden_states
        path_hidden = hidden[path.reshape(-1)]  # the path's target features, in path order
        # The path now sits at req_to_token[prefix .. prefix + m): the draft block's
        # slots and positions (the block is L + 1 = accept-width wide).
        self._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=path_hidden,
            cache_loc=draft.verify_out_cache_loc_2d.reshape(-1),
            cache_loc_2d=draft.verify_out_cache_loc_2d,
            positions=draft.positions_2d.reshape(-1),
            commit_lens=accept_lens,
        )
        logits_output.hidden_states = None

        next_draft_input = self._make_next_draft_input_decode(bonus_tokens=bonus, new_seq_lens=new_seq_lens)
        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=out_tokens.reshape(-1),
            accept_lens=accept_lens,
            can_run_cuda_graph=target_out.can_run_cuda_graph,
            next_draft_input=next_draft_input,
            speculative_num_draft_tokens=int(self.block_size),
            new_seq_lens=new_seq_lens,
            extra_keep_alive_refs=[verify_forward_batch],
        )
