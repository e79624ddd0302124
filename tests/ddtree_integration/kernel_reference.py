"""What the verify kernels DDTree feeds require, and what they compute, on a CPU.

The CUDA kernels of the pin (sglang-kernel 0.4.5, the version
sglang 0.5.17 requires) cannot run here.  This module holds, for tests only:

* ``CHECKS_FILE``: the argument checks of ``verify_tree_greedy`` and
  ``tree_speculative_sampling_target_only`` as compiled into the wheel's
  ``sgl_kernel/sm90/common_ops.abi3.so`` (extracted with ``strings``; wheel
  sha256 in the file's header).  ``check_*`` below raise exactly those messages,
  and a test asserts every message they can raise occurs in that file.
* ``verify_tree_greedy_reference``: the ``VerifyTreeGreedy`` kernel
  (sgl-kernel/csrc/speculative/eagle_utils.cu) transliterated, one request
  per loop iteration as the kernel runs one CUDA block per request.
* ``parents_like_causal_conv1d``: the parent derivation the hybrid
  linear-attention backend's tree conv kernel performs from
  retrieve_next_token / retrieve_next_sibling
  (python/sglang/kernels/ops/mamba/causal_conv1d_triton.py in v0.5.17,
  ``_causal_conv1d_update_kernel``, HAS_EAGLE_TREE_CUSTOM_ATTN_MASK), the
  parents the GDN / Mamba state updates then start each node from.
"""

from __future__ import annotations

from pathlib import Path

import torch

CHECKS_FILE = Path(__file__).resolve().parent / "data" / "sgl_kernel_0.4.5_verify_checks.txt"


class KernelContractError(RuntimeError):
    pass


def compiled_messages() -> list[str]:
    return [
        line.rstrip("\n")
        for line in CHECKS_FILE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _check_input(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise KernelContractError(f"{name} must be contiguous")


def _check_dim(n: int, name: str, t: torch.Tensor) -> None:
    if t.dim() != n:
        raise KernelContractError(f"{name} must be a {n}D tensor")


def _check_eq(a_name: str, a: int, b_expr: str, b: int) -> None:
    if a != b:
        raise KernelContractError(f"CHECK_EQ({a_name}, {b_expr}) failed. ")


def _check_dtype(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    if t.dtype != dtype:
        kind = {torch.int32: "int (torch.int32)", torch.int64: "long (torch.int64)", torch.float32: "float (torch.float32)"}[dtype]
        raise KernelContractError(f"Expected '{name}' to be of type {kind}.")


def check_verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index,
                             retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """The argument checks of sgl_kernel's verify_tree_greedy, in the compiled order."""
    for name, t in (("candidates", candidates), ("retrive_index", retrive_index),
                    ("retrive_next_token", retrive_next_token), ("retrive_next_sibling", retrive_next_sibling),
                    ("target_predict", target_predict)):
        _check_input(name, t)
    device = target_predict.device
    for name, t in (("candidates", candidates), ("retrive_index", retrive_index),
                    ("retrive_next_token", retrive_next_token), ("retrive_next_sibling", retrive_next_sibling),
                    ("target_predict", target_predict)):
        if t.device != device:
            raise KernelContractError(f"CHECK_EQ({name}.device(), device) failed. ")
    for n, name, t in ((1, "predicts", predicts), (2, "accept_index", accept_index), (1, "accept_token_num", accept_token_num),
                       (2, "candidates", candidates), (2, "retrive_index", retrive_index),
                       (2, "retrive_next_token", retrive_next_token), (2, "retrive_next_sibling", retrive_next_sibling),
                       (2, "target_predict", target_predict)):
        _check_dim(n, name, t)
    bs, nd = candidates.shape
    for name, t in (("accept_index", accept_index), ("accept_token_num", accept_token_num), ("retrive_index", retrive_index),
                    ("retrive_next_token", retrive_next_token), ("retrive_next_sibling", retrive_next_sibling),
                    ("target_predict", target_predict)):
        _check_eq("batch_size", bs, f"{name}.size(0)", t.shape[0])
    for name, t in (("retrive_index", retrive_index), ("retrive_next_token", retrive_next_token),
                    ("retrive_next_sibling", retrive_next_sibling), ("target_predict", target_predict)):
        _check_eq("num_draft_tokens", nd, f"{name}.size(1)", t.shape[1])
    for name, t, dt in (("predicts", predicts, torch.int32), ("accept_index", accept_index, torch.int32),
                        ("accept_token_num", accept_token_num, torch.int32), ("candidates", candidates, torch.int64),
                        ("retrive_index", retrive_index, torch.int64), ("retrive_next_token", retrive_next_token, torch.int64),
                        ("retrive_next_sibling", retrive_next_sibling, torch.int64), ("target_predict", target_predict, torch.int64)):
        _check_dtype(name, t, dt)


def check_tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                                retrive_next_token, retrive_next_sibling, uniform_samples,
                                                uniform_samples_for_final_sampling, target_probs, draft_probs,
                                                threshold_single, threshold_acc) -> None:
    """The argument checks of sgl_kernel's tree_speculative_sampling_target_only that
    concern the tree arrays and the probabilities (the compiled messages)."""
    for name, t in (("candidates", candidates), ("retrive_index", retrive_index),
                    ("retrive_next_token", retrive_next_token), ("retrive_next_sibling", retrive_next_sibling),
                    ("uniform_samples", uniform_samples),
                    ("uniform_samples_for_final_sampling", uniform_samples_for_final_sampling),
                    ("target_probs", target_probs)):
        _check_input(name, t)
    _check_dim(1, "predicts", predicts)
    _check_dim(2, "accept_index", accept_index)
    _check_dim(1, "accept_token_num", accept_token_num)
    _check_dim(2, "candidates", candidates)
    _check_dim(2, "retrive_index", retrive_index)
    _check_dim(2, "retrive_next_token", retrive_next_token)
    _check_dim(2, "retrive_next_sibling", retrive_next_sibling)
    _check_dim(2, "uniform_samples", uniform_samples)
    _check_dim(3, "target_probs", target_probs)
    _check_dim(3, "draft_probs", draft_probs)
    bs, nd = candidates.shape
    _check_eq("batch_size", bs, "candidates.size(0)", candidates.shape[0])
    _check_eq("batch_size", bs, "target_probs.size(0)", target_probs.shape[0])
    _check_eq("num_draft_tokens", nd, "uniform_samples.size(1)", uniform_samples.shape[1])
    _check_eq("num_draft_tokens", nd, "target_probs.size(1)", target_probs.shape[1])
    _check_eq("vocab_size", draft_probs.shape[2], "target_probs.size(2)", target_probs.shape[2])
    for name, t, dt in (("predicts", predicts, torch.int32), ("accept_index", accept_index, torch.int32),
                        ("accept_token_num", accept_token_num, torch.int32), ("candidates", candidates, torch.int64),
                        ("retrive_index", retrive_index, torch.int64), ("retrive_next_token", retrive_next_token, torch.int64),
                        ("retrive_next_sibling", retrive_next_sibling, torch.int64),
                        ("uniform_samples", uniform_samples, torch.float32),
                        ("uniform_samples_for_final_sampling", uniform_samples_for_final_sampling, torch.float32),
                        ("target_probs", target_probs, torch.float32)):
        _check_dtype(name, t, dt)
    if not threshold_single >= 0:
        raise KernelContractError("CHECK_GE(threshold_single, 0) failed. ")
    if not 1 >= threshold_single:
        raise KernelContractError("CHECK_GE(1, threshold_single) failed. ")
    if not threshold_acc >= 0:
        raise KernelContractError("CHECK_GE(threshold_acc, 0) failed. ")
    if not 1 >= threshold_acc:
        raise KernelContractError("CHECK_GE(1, threshold_acc) failed. ")


def verify_tree_greedy_reference(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                 retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """VerifyTreeGreedy<int32, int64>, one request at a time (in place, like the kernel)."""
    bs, nd = candidates.shape
    num_spec_step = accept_index.shape[1]
    cand = candidates.reshape(-1).tolist()
    ri = retrive_index.reshape(-1).tolist()
    nt = retrive_next_token.reshape(-1).tolist()
    ns = retrive_next_sibling.reshape(-1).tolist()
    tp = target_predict.reshape(-1).tolist()
    for bx in range(bs):
        last = ri[bx * nd]
        accept_index[bx, 0] = last
        num_accepted = 0
        cur = 0
        for _ in range(1, num_spec_step):
            cur = nt[bx * nd + cur]
            while cur != -1:
                draft_index = ri[bx * nd + cur]
                if cand[bx * nd + cur] == tp[last]:
                    predicts[last] = tp[last]
                    num_accepted += 1
                    accept_index[bx, num_accepted] = draft_index
                    last = draft_index
                    break
                cur = ns[bx * nd + cur]
            if cur == -1:
                break
        accept_token_num[bx] = num_accepted
        predicts[last] = tp[last]


def parents_like_causal_conv1d(retrieve_next_token: torch.Tensor, retrieve_next_sibling: torch.Tensor) -> torch.Tensor:
    """[bs, T] parent index per token as the tree conv kernel derives it (root and
    unreachable tokens keep the kernel's initial 0)."""
    bs, T = retrieve_next_token.shape
    out = torch.zeros((bs, T), dtype=torch.int64)
    for b in range(bs):
        parent = [0] * T
        nt = retrieve_next_token[b].tolist()
        ns = retrieve_next_sibling[b].tolist()
        for tok in range(T):  # tl.static_range(seqlen): tokens in index order
            if nt[tok] != -1:
                parent[nt[tok]] = tok
            if ns[tok] != -1:
                parent[ns[tok]] = parent[tok]
        out[b] = torch.tensor(parent)
    return out
