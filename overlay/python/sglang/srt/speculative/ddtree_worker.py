"""DDTREE worker: DFlash's drafter, a DDTree, and EAGLE's tree verify (sgl-overlay).

One decode step:

1. ``DFlashWorker._run_draft_block`` (the DFlash worker's own draft forward):
   append the newly committed target features to the draft KV cache and run
   the drafter over [bonus, MASK x (block - 1)].
2. The per-position log-probabilities of the L = block - 1 drafted positions
   over the full vocabulary (the target's vocab-parallel LM head; with tensor
   parallelism the ranks' top-K and log-sum-exp are gathered and merged, so
   every rank builds the same tree), then the best-first tree of ``budget``
   nodes (``ddtree_tree.build_ddtree``).
3. Verify inputs in SGLang's tree layout (``ddtree_tree.build_verify_inputs``)
   as an ``EagleVerifyInput`` -- the input EAGLE with topk > 1 verifies with:
   the same KV allocation (``prepare_for_verify``), the same custom-mask
   attention arguments, the same acceptance kernels (``verify_tree_greedy`` at
   temperature 0, ``tree_speculative_sampling_target_only`` otherwise, with no
   draft probabilities: lossless), finish checks and KV eviction.
4. Commit: the hybrid linear-attention backend computed one intermediate SSM /
   conv state per tree node (its tree mode follows each node's parent); the
   state of the **last accepted node** is committed by EAGLE's own
   ``_mamba_verify_update``.  The target features of the accepted path, in path
   order, become the drafter's next context (``_append_target_hidden_to_draft_kv``).

What is refused at start-up is in ``ddtree_algo.py``.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from sglang.srt.distributed import get_tp_group
from sglang.srt.managers.schedule_batch import ModelWorkerBatch, ScheduleBatch
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
from sglang.srt.speculative.ddtree_tree import TREE_MODE_TOPK, build_ddtree, build_verify_inputs, topk_logprobs
from sglang.srt.speculative.dflash_info import DFlashDraftInput
from sglang.srt.speculative.dflash_worker import DFlashWorker
from sglang.srt.speculative.eagle_info import EagleVerifyInput

logger = logging.getLogger(__name__)


@dataclass
class DDTreeVerifyInput(EagleVerifyInput):
    """EAGLE's tree-verify input, holding one DDTree per request.

    ``hidden_states`` is set to the verify forward's target features before
    ``verify`` (which gathers the accepted rows from ``batch.spec_info``)."""

    hidden_states: Optional[torch.Tensor] = None


def make_verify_input(
    tree,
    root_tokens: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_cpu: torch.Tensor,
    seq_lens_sum: int,
    num_draft_positions: int,
) -> DDTreeVerifyInput:
    """The verify input of a batch of trees.

    Per request N = budget + 1 verify tokens (root = the bonus token at
    position seq_len, nodes at seq_len + depth); accept width L + 1, the
    longest path a tree of depth <= L can accept (root included)."""
    vi = build_verify_inputs(tree, root_tokens, seq_lens, prefix_lens_sum=int(seq_lens_sum))
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
        seq_lens_sum=int(seq_lens_sum),
        seq_lens_cpu=seq_lens_cpu,
    )


def graph_capture_verify_input(server_args, num_tokens_per_bs: int, custom_mask: torch.Tensor) -> DDTreeVerifyInput:
    """The verify input the target's CUDA graphs are captured with (called by
    ``CudaGraphRunner.get_spec_info`` for DDTREE's target; the drafter's graphs
    stay DFlash's).

    It is EAGLE's tree-verify capture input (the EAGLE branch of
    ``get_spec_info``) with DDTREE's values: N = budget + 1 tokens per request,
    topk 2 and a custom mask, so that the attention backends capture their
    custom-mask path (flashinfer's wrappers get a mask buffer; triton's kernel
    reads its static mask), which replay fills from each step's tree
    (``make_verify_input``). The hybrid linear-attention backend captures its
    static LCRS buffers in tree mode from ``speculative_eagle_topk`` alone and
    copies the tree's arrays into them at replay."""
    num_verify_tokens = int(server_args.speculative_ddtree_budget) + 1
    if int(num_tokens_per_bs) != num_verify_tokens:
        raise RuntimeError(
            f"DDTREE: the target's CUDA graphs would be captured with {num_tokens_per_bs} tokens per "
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


@contextmanager
def _as_dflash_drafter(server_args, block_size: int):
    """The DFlash worker reads its block size (and the draft runner its verify
    width) from ``speculative_num_draft_tokens``; for DDTREE that field holds the
    tree's verify width, so the drafter is built with the block size in it."""
    saved = (server_args.speculative_num_draft_tokens, server_args.speculative_eagle_topk)
    server_args.speculative_num_draft_tokens = int(block_size)
    server_args.speculative_eagle_topk = 1
    try:
        yield
    finally:
        server_args.speculative_num_draft_tokens, server_args.speculative_eagle_topk = saved


class DDTreeWorker(DFlashWorker):
    """DDTree speculative decoding worker (spec-v1, tp >= 1, pp = 1, page size 1)."""

    def __init__(self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port, target_worker):
        block_size = int(server_args.speculative_dflash_block_size)
        with _as_dflash_drafter(server_args, block_size):
            super().__init__(
                server_args=server_args,
                gpu_id=gpu_id,
                tp_rank=tp_rank,
                dp_rank=dp_rank,
                moe_ep_rank=moe_ep_rank,
                attn_cp_rank=attn_cp_rank,
                moe_dp_rank=moe_dp_rank,
                nccl_port=nccl_port,
                target_worker=target_worker,
            )
        self.budget = int(server_args.speculative_ddtree_budget)
        self.num_verify_tokens = self.budget + 1
        self.num_draft_positions = int(self.block_size) - 1
        if self.num_verify_tokens != int(server_args.speculative_num_draft_tokens):
            raise RuntimeError(
                f"DDTREE: speculative_num_draft_tokens is {server_args.speculative_num_draft_tokens}, "
                f"expected budget + 1 = {self.num_verify_tokens}; the server arguments did not go "
                "through ddtree_algo.finish_ddtree_server_args (sglang/srt/server_args.py)."
            )
        if self.tp_rank == 0:
            logger.info(
                "DDTREE worker: block %d, %d draft positions, budget %d, %d verify tokens per request.",
                self.block_size,
                self.num_draft_positions,
                self.budget,
                self.num_verify_tokens,
            )

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
        bs, L, H = hidden.shape
        logits = torch.matmul(hidden.reshape(-1, H).to(weight.dtype), weight[:num_org].T)
        logits = logits.float().view(bs, L, num_org)
        tp_group = get_tp_group()
        tp_size = int(tp_group.world_size)
        if tp_size == 1:
            ids, lps = topk_logprobs(logits, self.budget)
            return ids + org_start, lps
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

    def _prepare_for_speculative_decoding(self, batch: ScheduleBatch, draft_input: DFlashDraftInput):
        if batch.forward_mode.is_extend() or batch.forward_mode.is_idle():
            return
        if batch.has_grammar:
            raise RuntimeError(
                "Invariant broken: DDTREE batch has grammar constraints; the server starts with "
                "--grammar-backend none and the scheduler refuses grammar requests."
            )
        draft_hidden, block_ids, _, lm_head = self._run_draft_block(batch, draft_input)
        ids, logprobs = self._draft_topk_logprobs(draft_hidden[:, 1:, :], lm_head)
        tree = build_ddtree(ids, logprobs, self.budget)
        verify_input = make_verify_input(
            tree,
            root_tokens=block_ids[:, 0],
            seq_lens=batch.seq_lens,
            seq_lens_cpu=batch.seq_lens_cpu,
            seq_lens_sum=batch.seq_lens_sum,
            num_draft_positions=self.num_draft_positions,
        )
        verify_input.prepare_for_verify(batch, self.page_size)
        batch.forward_mode = ForwardMode.TARGET_VERIFY
        batch.spec_info = verify_input
        batch.return_hidden_states = False

    # ----------------------------------------------------------------- verify
    def forward_batch_generation(self, batch, **kwargs) -> GenerationBatchResult:
        if getattr(batch, "return_logprob", False):
            raise RuntimeError(
                "Invariant broken: DDTREE batch requested return_logprob, but the scheduler "
                "refuses such requests for DFlash-drafted algorithms."
            )
        if isinstance(batch, ModelWorkerBatch) or batch.forward_mode.is_extend() or batch.is_extend_in_batch:
            # Prefill: the target runs the prompt and its features fill the draft KV (DFlash's path).
            return super().forward_batch_generation(batch, **kwargs)

        draft_input = batch.spec_info
        if not isinstance(draft_input, DFlashDraftInput):
            raise RuntimeError(
                "DDTREE decode requires DFlashDraftInput state on the running batch "
                f"(got {type(draft_input).__name__}); the request did not complete prefill."
            )
        self._prepare_for_speculative_decoding(batch, draft_input)
        verify_input: DDTreeVerifyInput = batch.spec_info
        seq_lens_pre_verify = batch.seq_lens.clone()
        model_worker_batch = batch.get_model_worker_batch(seq_lens_cpu_cache=verify_input.seq_lens_cpu)
        batch_result = self.target_worker.forward_batch_generation(model_worker_batch, is_verify=True, **kwargs)
        logits_output = batch_result.logits_output
        if logits_output.hidden_states is None:
            raise RuntimeError(
                "DDTREE verify needs the target's DFlash context features (CaptureHiddenMode.FULL), got None."
            )
        verify_input.hidden_states = logits_output.hidden_states
        res = verify_input.verify(batch, logits_output, batch.token_to_kv_pool_allocator, self.page_size)

        attn_backend = self.target_worker.model_runner.attn_backend
        if hasattr(attn_backend, "update_mamba_state_after_mtp_verify"):
            from sglang.srt.speculative.eagle_worker import EAGLEWorker

            # EAGLE's tree commit: last_correct_step_indices = the last accepted node's
            # local index (topk > 1 branch), and the prefix-cache track points along the path.
            EAGLEWorker._mamba_verify_update(self, batch, res, logits_output, verify_input, seq_lens_pre_verify)

        commit_lens_cpu = [n + 1 for n in res.num_correct_drafts_per_req_cpu]
        # EagleVerifyInput.verify advances seq_lens / seq_lens_cpu; the host-side sum
        # (the next step's custom-mask size) is kept here, as DFlash's verify does.
        batch.seq_lens_sum += sum(commit_lens_cpu)
        device = res.accept_indices.device
        commit_lens = torch.tensor(commit_lens_cpu, dtype=torch.int32, device=device)
        last = torch.cumsum(commit_lens.to(torch.int64), 0) - 1
        new_bonus_tokens = res.accept_tokens.to(torch.int64)[last]
        draft_input.bonus_tokens = new_bonus_tokens
        draft_input.target_hidden = logits_output.hidden_states[res.accept_indices]
        draft_input.ctx_lens = commit_lens
        logits_output.hidden_states = None
        self._append_target_hidden_to_draft_kv(batch, draft_input)
        batch.spec_info = draft_input
        batch.forward_mode = ForwardMode.DECODE

        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=new_bonus_tokens,
            num_correct_drafts=sum(res.num_correct_drafts_per_req_cpu),
            num_correct_drafts_per_req_cpu=res.num_correct_drafts_per_req_cpu,
            can_run_cuda_graph=batch_result.can_run_cuda_graph,
        )
