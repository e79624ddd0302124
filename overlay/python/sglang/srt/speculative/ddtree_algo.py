"""DDTREE: registration and server-argument rules (sgl-overlay).

DDTree (arXiv 2604.12989) drafts with the unchanged DFlash drafter and verifies
a tree of the ``budget`` most probable draft prefixes in one target pass
(``ddtree_tree.py`` holds the tree logic, ``ddtree_worker.py`` the worker, a
``DFlashWorkerV2`` that runs with the overlap scheduler or without it).

DDTREE is registered through the plugin registry (``SpeculativeAlgorithm.register``;
called at the end of ``spec_info.py``), with a ``CustomSpecAlgo`` subclass whose
``is_dflash()`` / ``is_dflash_family()`` are True: every DFlash branch of the
server (target aux-hidden capture, the draft KV cell scaling of the memory
sizing, the per-request checks of ``validate_dflash_request``, the overlap
scheduler's KV reservation ``DFlashDraftInputV2.prepare_for_decode``) applies
unchanged, because the drafter *is* DFlash's.

Server arguments, in the order ``arg_groups/speculative_hook.handle_speculative_decoding``
runs them:

1. ``validate_ddtree_server_args`` (the registry's validator hook): refuses
   what DDTREE cannot run with, naming the flag to change;
2. ``DDTreeSpecAlgo.handle_server_args`` (the per-algorithm hook): the DFLASH
   rules (``_handle_dflash``: they resolve the drafter's block size into
   ``speculative_num_draft_tokens``), then ``finish_ddtree_server_args``:
   records the block size in ``speculative_dflash_block_size`` and sets
   ``speculative_num_draft_tokens`` to ``budget + 1`` -- the verify width,
   which every consumer of that field on the target side must see: the Mamba
   intermediate-state pools, the attention backends' verify buffers, the
   CUDA graphs and the overlap scheduler's per-step KV reservation.
   ``speculative_eagle_topk`` is set to 2: it is upstream's switch for tree
   verification (the hybrid linear-attention backend derives per-node parents
   from the LCRS arrays only when it is > 1); DDTree's branching is not bounded by it.

``--speculative-ddtree-chain-batch K`` (``step_verify``): a decode step of K
requests or more verifies DFlash's chain (the drafter's greedy block, block
size tokens a request, DFlash's own verify and acceptance) instead of the tree;
the worker keeps a second target attention backend and set of verify CUDA
graphs for it, built as DFLASH's. Where the tree's extra acceptance cannot pay
for its verify (larger batches), the step costs what a DFLASH step costs.
``--speculative-ddtree-adaptive`` (``ddtree_adaptive.AdaptiveVerify``): the same two
paths, each step taking the one that has committed more tokens a second at its
batch size, measured from the server's own steps (the two flags exclude each other).

The drafter keeps DFlash's width: ``get_num_tokens_per_req_for_target_verify``
gives the draft worker the block size (its CUDA graphs, its warm-up), the target
``budget + 1``. The target's verify graphs are captured with EAGLE's tree-verify
input (``ddtree_worker.graph_capture_verify_input``, called from
``DecodeCudaGraphRunner.get_spec_info``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, FrozenSet, Optional, Sequence

from sglang.srt.speculative.ddtree_adaptive import StepVerify
from sglang.srt.speculative.ddtree_tree import TREE_MODE_TOPK
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

NAME = "DDTREE"
# Target attention backends whose TARGET_VERIFY honours a per-request bool custom
# mask in FULL_MASK layout (EagleVerifyInput.generate_attn_arg_prefill).
SUPPORTED_ATTENTION_BACKENDS = ("flashinfer", "triton")
# What ServerArgs._handle_grammar_backend makes of an unset --grammar-backend.
DEFAULT_GRAMMAR_BACKEND = "xgrammar"
# Above this many verify tokens the hybrid tree conv kernel's JIT compile takes minutes.
HYBRID_TREE_COMPILE_WARN_TOKENS = 64


def step_verify(batch_size: int, chain_batch: Optional[int]) -> StepVerify:
    """The rule of ``--speculative-ddtree-chain-batch``: the chain from
    ``chain_batch`` requests up, the tree below it (always the tree when unset)."""
    if chain_batch is not None and int(batch_size) >= int(chain_batch):
        return StepVerify.CHAIN
    return StepVerify.TREE


def chain_graph_sizes(capture_bs: Sequence[int], chain_batch: Optional[int]) -> FrozenSet[int]:
    """The captured draft-graph batch sizes of which every replay is a chain step: the graph
    runner pads a batch to the smallest captured size that holds it, so the graph of size g
    replays the batches above the next smaller captured size up to g, all of them chain
    steps when that smaller size + 1 >= ``chain_batch``. Their draft head computes the greedy
    chain only (no top-K of the budget, no tree); every other size builds the tree."""
    if chain_batch is None:
        return frozenset()
    out, below = set(), 0
    for g in sorted({int(b) for b in capture_bs}):
        if step_verify(below + 1, chain_batch) is StepVerify.CHAIN:
            out.add(g)
        below = g
    return frozenset(out)


class DDTreeSpecAlgo(CustomSpecAlgo):
    """The registered DDTREE algorithm: a DFlash drafter with a tree verify."""

    def is_dflash(self) -> bool:
        return True

    def is_dflash_family(self) -> bool:
        return True

    def is_ddtree(self) -> bool:
        return True

    def supports_target_verify_for_draft(self) -> bool:
        # The drafter runs DFlash's block forward in TARGET_VERIFY mode.
        return True

    def need_topk(self) -> bool:
        # No EAGLE top-k state is relayed between overlap iterations.
        return False

    def carries_draft_hidden_states(self) -> bool:
        return False

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens=True, needs_confidence_relay=False):
        """The overlap scheduler's relay of bonus tokens and sequence lengths,
        as for the builtin algorithms (``SpeculativeAlgorithm.create_future_map``)."""
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay)

    def handle_server_args(self, server_args: "ServerArgs") -> None:
        """The DFLASH rules (block size, request count, draft backend), then DDTREE's."""
        from sglang.srt.arg_groups.speculative_hook import _handle_dflash

        _handle_dflash(server_args)
        finish_ddtree_server_args(server_args)

    def get_num_tokens_per_req_for_target_verify(self, num_draft_tokens: int, is_draft_worker: bool) -> int:
        """Verify-shaped tokens per request: the drafter's DFlash block for the
        draft worker, the tree's budget + 1 (``num_draft_tokens``) for the target."""
        if is_draft_worker:
            from sglang.srt.runtime_context import get_spec

            block = get_spec().speculative_dflash_block_size
            if block is not None:
                return int(block)
        return num_draft_tokens


def _ddtree_worker_factory(server_args: "ServerArgs"):
    # V2 worker: drives overlap and non-overlap scheduling (the scheduler runs it
    # synchronously with --disable-overlap-schedule), as DFLASH's does.
    from sglang.srt.speculative.ddtree_worker import DDTreeWorker

    return DDTreeWorker


def _refuse(what: str, why: str, fix: str) -> None:
    raise ValueError(
        f"--speculative-algorithm DDTREE: {what} is not supported ({why}; "
        f"sglang/srt/speculative/ddtree_algo.py). {fix}"
    )


def validate_ddtree_server_args(args: "ServerArgs") -> None:
    """Refuse, at start-up, what DDTREE does not support (runs before the DFLASH rules)."""
    budget = args.speculative_ddtree_budget
    if budget is not None and int(budget) < 1:
        raise ValueError(
            f"--speculative-ddtree-budget must be >= 1 (tree nodes, root not counted), "
            f"got {budget}. Set it to e.g. 15 (DFlash's block of 16 minus the root) or more."
        )
    chain_batch = getattr(args, "speculative_ddtree_chain_batch", None)
    if chain_batch is not None and int(chain_batch) < 1:
        raise ValueError(
            f"--speculative-ddtree-chain-batch must be >= 1 (the batch size from which a step "
            f"verifies DFlash's chain), got {chain_batch}. Set it to the batch size where DFLASH "
            "overtakes DDTREE (python3 -m tools.gpu.spec_value chain-batch REPORT tells it from a "
            "measured run), or leave it out to verify the tree at every batch size."
        )
    if getattr(args, "speculative_ddtree_adaptive", False) and int(getattr(args, "tp_size", 1) or 1) > 1:
        _refuse(
            "--speculative-ddtree-adaptive",
            f"with --tp-size {args.tp_size} each rank would time its own steps and could choose another "
            "verify than the others",
            "Use --speculative-ddtree-chain-batch K (the same rule on every rank) or one TP rank.",
        )
    if chain_batch is not None and getattr(args, "speculative_ddtree_adaptive", False):
        raise ValueError(
            f"--speculative-ddtree-adaptive and --speculative-ddtree-chain-batch {chain_batch} both choose "
            "which decode steps verify DFlash's chain: the first from the steps' measured rates, the "
            "second from a fixed batch size. Pass one of them."
        )
    if args.grammar_backend in (None, DEFAULT_GRAMMAR_BACKEND):
        # SGLang's default (None, resolved to xgrammar by _handle_grammar_backend):
        # start without grammar rather than refuse a command line with no grammar
        # flag at all; requests that ask for a grammar are refused one by one
        if args.grammar_backend is not None:
            logger.warning(
                "--speculative-algorithm DDTREE: grammar-constrained decoding is turned off "
                "(--grammar-backend %s -> none): the tree verify applies no grammar mask; requests "
                "asking for json_schema, regex, ebnf or structural_tag are refused.",
                args.grammar_backend,
            )
        args.grammar_backend = "none"
    elif args.grammar_backend != "none":
        _refuse(
            f"grammar-constrained decoding (--grammar-backend {args.grammar_backend})",
            "the tree verify applies no grammar mask",
            "Start with --grammar-backend none (or without --grammar-backend); requests asking "
            "for json_schema, regex, ebnf or structural_tag are then refused per request.",
        )
    if args.enable_return_hidden_states:
        _refuse(
            "--enable-return-hidden-states",
            "the verify's hidden states feed the drafter and are not returned per token",
            "Start without --enable-return-hidden-states.",
        )
    if int(args.page_size or 1) != 1:
        _refuse(
            f"--page-size {args.page_size}",
            "the tree verify and its commit (the accepted path's KV moved to the front of the "
            "request's verify slots) are built and tested for page size 1 only",
            "Start with --page-size 1.",
        )
    backends = {
        b
        for b in (args.attention_backend, args.prefill_attention_backend, args.decode_attention_backend)
        if b is not None
    }
    unsupported = sorted(b for b in backends if b not in SUPPORTED_ATTENTION_BACKENDS)
    if unsupported:
        _refuse(
            f"attention backend {', '.join(unsupported)}",
            "the tree verify needs a backend that applies a per-request custom mask "
            f"({', '.join(SUPPORTED_ATTENTION_BACKENDS)})",
            "Start with --attention-backend flashinfer (or triton).",
        )
    if getattr(args, "mamba_radix_cache_strategy", None) == "extra_buffer_lazy":
        _refuse(
            "--mamba-radix-cache-strategy extra_buffer_lazy",
            "the lazy track plan is consumed by prepare_mamba_track_for_verify, which the DFlash "
            "verify (DDTREE's too) bypasses; upstream refuses it for DFLASH (server_args.py)",
            "Start with --mamba-radix-cache-strategy extra_buffer (or no_buffer).",
        )
    # --linear-attn-*-backend flashinfer: no rule. Since sgl-project/sglang#29734 the GDN
    # backend verifies a tree (retrieve_parent_token) with its Triton kernel whatever the
    # decode/prefill backend; KDA refuses a FlashInfer tree verify itself (kda_backend.py).
    if getattr(args, "speculative_use_rejection_sampling", False):
        _refuse(
            "--speculative-use-rejection-sampling",
            "it needs the drafter's proposal distribution per verified token, and the tree "
            "verify is target-only (lossless without draft probabilities)",
            "Start without --speculative-use-rejection-sampling.",
        )
    for flag, value in (
        ("--speculative-accept-threshold-single", args.speculative_accept_threshold_single),
        ("--speculative-accept-threshold-acc", args.speculative_accept_threshold_acc),
    ):
        if float(value) != 1.0:
            _refuse(f"{flag} {value}", "a threshold below 1 makes verification lossy", f"Leave {flag} at 1.0.")
    for flag, value in (
        ("--speculative-num-draft-tokens", args.speculative_num_draft_tokens),
        ("--speculative-eagle-topk", args.speculative_eagle_topk),
        ("--speculative-num-steps", args.speculative_num_steps),
    ):
        if value is not None:
            _refuse(
                f"{flag} {value}",
                "DDTREE derives the verify width from --speculative-ddtree-budget and the "
                "drafter's block size",
                f"Drop {flag}; set --speculative-ddtree-budget (tree nodes) and, if the "
                "drafter's config lacks it, --speculative-dflash-block-size.",
            )
    if args.disaggregation_mode not in (None, "null"):
        _refuse(
            f"--disaggregation-mode {args.disaggregation_mode}",
            "the disaggregated decode pools are sized for EAGLE's top-k layout",
            "Start without --disaggregation-mode.",
        )


def finish_ddtree_server_args(args: "ServerArgs") -> None:
    """After the DFLASH rules: verify width = budget + 1, block size recorded."""
    block_size = int(args.speculative_num_draft_tokens)
    if block_size < 2:
        raise ValueError(
            f"--speculative-algorithm DDTREE needs a DFlash block size >= 2 (one root and at "
            f"least one drafted position), got {block_size} from the drafter's config or "
            "--speculative-dflash-block-size. Use a DFlash drafter with a block of 8 or 16."
        )
    args.speculative_dflash_block_size = block_size
    if args.speculative_ddtree_budget is None:
        args.speculative_ddtree_budget = block_size - 1
        logger.info(
            "--speculative-ddtree-budget not set; using the drafter's %d draft positions.",
            block_size - 1,
        )
    budget = int(args.speculative_ddtree_budget)
    if budget + 1 < block_size:
        # The drafter's block takes block_size KV slots and req_to_token entries per
        # request; the per-request reservations (req_to_token width, tokens reserved
        # per decode step) count speculative_num_draft_tokens = budget + 1.
        raise ValueError(
            f"--speculative-ddtree-budget {budget} is below the drafter's {block_size - 1} "
            f"draft positions: the DFlash block of {block_size} tokens is allocated from the "
            f"per-request verify reservation of budget + 1 = {budget + 1} tokens "
            "(sglang/srt/speculative/ddtree_algo.py). Set --speculative-ddtree-budget "
            f"to at least {block_size - 1}."
        )
    args.speculative_ddtree_budget = budget
    args.speculative_num_draft_tokens = budget + 1
    args.speculative_num_steps = 1
    args.speculative_eagle_topk = TREE_MODE_TOPK
    if budget + 1 > HYBRID_TREE_COMPILE_WARN_TOKENS:
        logger.warning(
            "DDTREE: %d verify tokens per request. On hybrid linear-attention models the tree-mode "
            "conv kernel (causal_conv1d_update) unrolls over the verify tokens; its Triton compile "
            "took 9 s at 32 tokens and 166 s at 128 on an H200 (docs/ddtree.md), so the first "
            "verify stalls until it is cached. Budgets up to %d avoid that.",
            budget + 1,
            HYBRID_TREE_COMPILE_WARN_TOKENS - 1,
        )
    logger.info(
        "DDTREE: drafter block %d (%d draft positions), tree budget %d, %d verify tokens "
        "per request (speculative_num_draft_tokens).",
        block_size,
        block_size - 1,
        budget,
        budget + 1,
    )
    chain_batch = getattr(args, "speculative_ddtree_chain_batch", None)
    if chain_batch is not None:
        logger.info(
            "DDTREE: from %d requests a step up, DFlash's chain of %d tokens per request is "
            "verified instead of the tree (--speculative-ddtree-chain-batch).",
            int(chain_batch),
            block_size,
        )


    if getattr(args, "speculative_ddtree_adaptive", False):
        logger.info(
            "DDTREE: each decode step verifies the tree or DFlash's chain of %d tokens per request, "
            "whichever has committed more tokens a second at its batch size, measured from this "
            "server's own steps (--speculative-ddtree-adaptive).",
            block_size,
        )


def register(register_decorator: Callable) -> None:
    """Register DDTREE; ``register_decorator`` is ``SpeculativeAlgorithm.register``."""
    register_decorator(
        NAME,
        supports_overlap=True,
        validate_server_args=validate_ddtree_server_args,
        spec_class=DDTreeSpecAlgo,
    )(_ddtree_worker_factory)
