"""DDTREE: registration and server-argument rules (sgl-overlay).

DDTree (arXiv 2604.12989) drafts with the unchanged DFlash drafter and verifies
a tree of the ``budget`` most probable draft prefixes in one target pass
(``ddtree_tree.py`` holds the tree logic, ``ddtree_worker.py`` the worker).

DDTREE is registered through the pin's plugin registry
(``SpeculativeAlgorithm.register``; called at the end of ``spec_info.py``), with
a ``CustomSpecAlgo`` subclass whose ``is_dflash()`` is True: every DFlash
branch of the server (target aux-hidden capture, draft model loading, the draft
KV cell scaling of the memory sizing, the per-request refusal of logprobs and
grammar) applies unchanged, because the drafter *is* DFlash's.

Server arguments, in the order ``ServerArgs._handle_speculative_decoding`` runs them:

1. ``validate_ddtree_server_args`` (the registry's validator hook, before the
   DFLASH rules): refuses what DDTREE does not support, with the flag to change.
2. the pin's DFLASH rules (they resolve the drafter's block size into
   ``speculative_num_draft_tokens``);
3. ``finish_ddtree_server_args``: records the block size in
   ``speculative_dflash_block_size`` and sets ``speculative_num_draft_tokens``
   to ``budget + 1`` -- the verify width, which every consumer of that field on
   the target side must see: the Mamba intermediate-state reservation of the
   memory sizing, the intermediate SSM / conv-window pools, the attention
   backends' verify buffers and the per-request KV allocation of the verify.
   ``speculative_eagle_topk`` is set to 2: it is upstream's switch for tree
   verification (the hybrid linear-attention backend derives per-node parents
   from the LCRS arrays only when it is > 1); DDTree's branching is not bounded by it.

CUDA graphs: the target's verify graphs are captured with EAGLE's tree-verify
input (``ddtree_worker.graph_capture_verify_input``, called from
``CudaGraphRunner.get_spec_info``), the drafter's with DFlash's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from sglang.srt.speculative.ddtree_tree import TREE_MODE_TOPK
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

NAME = "DDTREE"
# Target attention backends whose TARGET_VERIFY honours a per-request bool custom
# mask in FULL_MASK layout (EagleVerifyInput.generate_attn_arg_prefill).
SUPPORTED_ATTENTION_BACKENDS = ("flashinfer", "triton")
# What ServerArgs._handle_grammar_backend makes of an unset --grammar-backend at the pin.
DEFAULT_GRAMMAR_BACKEND = "xgrammar"
# Above this many verify tokens the hybrid tree conv kernel's JIT compile takes minutes.
HYBRID_TREE_COMPILE_WARN_TOKENS = 64


class DDTreeSpecAlgo(CustomSpecAlgo):
    """The registered DDTREE algorithm: a DFlash drafter with a tree verify."""

    def is_dflash(self) -> bool:
        return True

    def is_ddtree(self) -> bool:
        return True


def _ddtree_worker_factory(server_args: "ServerArgs"):
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
    if not args.disable_overlap_schedule:
        _refuse(
            "overlap scheduling",
            "the DDTREE worker is the spec-v1 DFlash worker with a tree verify",
            "Start with --disable-overlap-schedule.",
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
            "the tree commit keeps the accepted KV slots where they are, which needs page size 1",
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
    for flag, value in (
        ("--linear-attn-backend", args.linear_attn_backend),
        ("--linear-attn-decode-backend", args.linear_attn_decode_backend),
        ("--linear-attn-prefill-backend", args.linear_attn_prefill_backend),
    ):
        if value == "flashinfer":
            _refuse(
                f"{flag} flashinfer",
                "FlashInfer's GDN verify kernel has no tree mode (it refuses retrieve_parent_token), "
                "and choosing it for decode or prefill makes it the verify kernel",
                f"Drop {flag} (the default, triton, verifies trees).",
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


def register(register_decorator: Callable) -> None:
    """Register DDTREE; ``register_decorator`` is ``SpeculativeAlgorithm.register``."""
    register_decorator(
        NAME,
        supports_overlap=False,
        validate_server_args=validate_ddtree_server_args,
        spec_class=DDTreeSpecAlgo,
    )(_ddtree_worker_factory)
