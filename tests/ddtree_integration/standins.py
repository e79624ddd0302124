"""CPU stand-ins for the GPU stack around one DFLASH/DDTREE spec-v2 decode step.

Only what cannot run here is stood in: the model runners' forwards, the KV
pools and the allocator, the Triton/CUDA kernels (by CPU versions of what they
compute: kernel_reference.py and the functions below), ``ForwardBatch`` (a
record of its fields), and the scheduler's batch and request objects (with the
fields the real worker, ``DFlashDraftInputV2.prepare_for_decode`` and
``eagle_sample`` read).  Everything else -- DFlash's spec-v2 worker and its
draft forward, DDTREE's worker and tree logic, the overlap scheduler's KV
reservation, EAGLE's acceptance (``eagle_sample``), the tree commit of the
Mamba state (``commit_mamba_states_after_verify``) and of the KV
(``move_accept_tokens_to_target_kvcache``), DFlash's draft-KV append -- is the
tree's own code, loaded by the targeted loader.

The toy target: the token after a sequence s is ``target_next(s)``, a hash of
the whole sequence.  Its verify forward reads each verify row's context from
the **target KV cache** (the token each slot of ``req_to_token[:prefix]`` holds,
so a wrong KV commit changes the logits), then the tree part from the **custom
mask and positions** it is given (the visible tree columns ordered by
position), and writes its own KV (each verify row's token and position) into
the verify slots.  Greedy decoding of that target is the reference the
committed tokens must equal.
"""

from __future__ import annotations

from enum import Enum
from types import SimpleNamespace

import torch

from tests.ddtree_integration import kernel_reference as kref

VOCAB = 29


def target_next(seq) -> int:
    h = 7
    for i, t in enumerate(seq):
        h = (h * 31 + (i + 3) * (int(t) + 5)) % 1000003
    return h % VOCAB


def greedy_reference(prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(target_next(seq))
    return seq[len(prompt):]


class Host(torch.Tensor):
    """A tensor that lives on the host in a real server (the scheduler's
    ``seq_lens_cpu`` mirror, the overlap reservation's bounds): reading it costs
    no device synchronisation.  Results of operations on it stay ``Host``."""


def host(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(Host)


# ----------------------------------------------------------------- enums / records

class ForwardMode(Enum):
    """The modes a decode step meets, with upstream's predicates (a target verify
    is an extend: ``forward_batch_info.ForwardMode.is_extend``)."""

    EXTEND = 1
    DECODE = 2
    TARGET_VERIFY = 3
    IDLE = 4

    def is_extend(self, include_draft_extend_v2=False):
        return self in (ForwardMode.EXTEND, ForwardMode.TARGET_VERIFY)

    def is_draft_extend_v2(self):
        return False

    def is_idle(self):
        return self is ForwardMode.IDLE

    def is_decode(self):
        return self is ForwardMode.DECODE

    def is_target_verify(self):
        return self is ForwardMode.TARGET_VERIFY

    def is_decode_or_idle(self):
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)


class CaptureHiddenMode(Enum):
    NULL = 0
    FULL = 1
    LAST = 2


class ForwardBatch(SimpleNamespace):
    """``ForwardBatch``: a record of the fields it is built with; ``init_new``
    takes the batch's verify fields, as the real one does for TARGET_VERIFY."""

    @classmethod
    def init_new(cls, batch, model_runner, capture_hidden_mode=None, **kw):
        return cls(forward_mode=batch.forward_mode, batch_size=batch.batch_size(), input_ids=batch.input_ids,
                   positions=batch.spec_info.positions, seq_lens=batch.seq_lens, seq_lens_cpu=batch.seq_lens_cpu,
                   seq_lens_sum=batch.seq_lens_sum, out_cache_loc=batch.out_cache_loc,
                   req_pool_indices=batch.req_pool_indices, spec_info=batch.spec_info,
                   capture_hidden_mode=capture_hidden_mode)


class GenerationBatchResult(SimpleNamespace):
    """``managers/utils.GenerationBatchResult``: a record of the fields it is built with."""


# ----------------------------------------------------------------- pools

class Allocator:
    """Token-slot allocator: hands out increasing slot ids; the target's KV
    cache: which (token, position) each slot holds."""

    def __init__(self, start=1000):
        self.next = start
        self.page_size = 1
        self.kv = {}  # slot -> (token, position)
        self.moves = []

    def alloc(self, n):
        out = torch.arange(self.next, self.next + n, dtype=torch.int64)
        self.next += n
        return out

    def get_kvcache(self):
        return self

    def move_kv_cache(self, tgt_loc, src_loc):
        """MHATokenToKVPool.move_kv_cache: every layer's K/V of src -> tgt (gathered first)."""
        pairs = list(zip(tgt_loc.tolist(), src_loc.tolist()))
        self.moves.append(pairs)
        snapshot = {s: self.kv.get(s) for _, s in pairs}
        for t, s in pairs:
            if snapshot[s] is not None:
                self.kv[t] = snapshot[s]


class Req:
    def __init__(self, prompt):
        self.origin_input_ids = list(prompt)
        self.output_ids = []
        self.kv_committed_len = len(prompt) - 1  # the last token is the bonus (not cached yet)
        self.kv = SimpleNamespace(kv_allocated_len=len(prompt) - 1)
        self.sampling_params = SimpleNamespace(top_k=-1)

    def tokens(self):
        return self.origin_input_ids + self.output_ids


class Greedy:
    """sampling_info of an all-greedy batch (the fields eagle_sample reads)."""

    def __init__(self, n):
        self.n = n
        self.is_all_greedy = True
        self.has_custom_logit_processor = False
        self.penalizer_orchestrator = SimpleNamespace(is_required=False)
        self.acc_linear_penalties = None
        self.acc_additive_penalties = None
        self.acc_scaling_penalties = None
        self.logit_bias = None
        self.sampling_seed = None
        self.need_top_k_sampling = False
        self.need_top_p_sampling = False

    def __len__(self):
        return self.n


class Sampled(Greedy):
    """sampling_info of a batch sampling at temperature 1, no top-k / top-p cut."""

    def __init__(self, n):
        super().__init__(n)
        self.is_all_greedy = False
        self.temperatures = torch.ones((n, 1))
        self.top_ks = torch.full((n,), VOCAB, dtype=torch.int32)
        self.top_ps = torch.ones(n)


class Batch:
    """The ScheduleBatch fields a spec-v2 DFLASH/DDTREE decode step reads and writes."""

    def __init__(self, reqs, req_to_token, allocator):
        self.reqs = reqs
        bs = len(reqs)
        lens = [r.kv_committed_len for r in reqs]
        self.seq_lens = torch.tensor(lens, dtype=torch.int64)
        self.seq_lens_cpu = host(torch.tensor(lens, dtype=torch.int64))
        self.seq_lens_sum = sum(lens)
        self.req_pool_indices = torch.arange(bs, dtype=torch.int64)
        self.req_pool_indices_cpu = list(range(bs))
        self.forward_mode = ForwardMode.DECODE
        self.is_extend_in_batch = False
        self.has_grammar = False
        self.return_logprob = False
        self.sampling_info = Greedy(bs)
        self.tree_cache = None
        self.req_to_token_pool = SimpleNamespace(req_to_token=req_to_token)
        self.token_to_kv_pool_allocator = allocator
        self.device = "cpu"
        self.mamba_track_indices = None
        self.spec_info = None
        self.out_cache_loc = None
        self.input_ids = None

    def batch_size(self):
        return len(self.reqs)


def alloc_for_spec_decode(tree_cache, req_to_token_pool, *, reqs, req_pool_indices, cur_kv_lens, cur_kv_lens_cpu,
                          nxt_kv_lens, nxt_kv_lens_cpu, num_needed_tokens, batch):
    """mem_cache/allocation.alloc_for_spec_decode: slots for req_to_token[cur, nxt) of every request."""
    allocator = batch.token_to_kv_pool_allocator
    assert int(num_needed_tokens) == int((nxt_kv_lens_cpu - cur_kv_lens_cpu).sum())
    for i, req in enumerate(reqs):
        cur, nxt = int(cur_kv_lens_cpu[i]), int(nxt_kv_lens_cpu[i])
        if nxt > cur:
            req_to_token_pool.req_to_token[int(req_pool_indices[i]), cur:nxt] = allocator.alloc(nxt - cur)
        req.kv.kv_allocated_len = nxt


# ----------------------------------------------------------------- models

class ToyTarget:
    """The target's verify forward (TARGET_VERIFY): context from the KV cache,
    tree from the custom mask and positions (no mask: a causal chain, DFLASH's);
    writes its KV into the verify slots.

    hidden_states row r = [r, position, token] (float), standing for the DFlash
    context features of verify row r."""

    def __init__(self, batch_ref, allocator):
        self.batch_ref = batch_ref
        self.allocator = allocator
        self.calls = []

    def forward_batch_generation(self, batch=None, forward_batch=None, is_verify=False, **kw):
        fb = forward_batch
        vi = fb.spec_info
        sched = self.batch_ref[0]
        req_to_token = sched.req_to_token_pool.req_to_token
        bs = fb.batch_size
        N = vi.draft_token_num
        tok = fb.input_ids.view(bs, N)
        pos = fb.positions.view(bs, N)
        mask = vi.custom_mask
        logits = torch.full((bs * N, VOCAB), -10.0)
        hidden = torch.zeros((bs * N, 3))
        off = 0
        for b in range(bs):
            P = int(fb.seq_lens[b])
            r = int(fb.req_pool_indices[b])
            prefix = [self.allocator.kv[int(s)][0] for s in req_to_token[r, :P].tolist()]
            assert [self.allocator.kv[int(s)][1] for s in req_to_token[r, :P].tolist()] == list(range(P)), \
                "the KV cache must hold positions 0..prefix-1 in order"
            if mask is None:  # a chain verify (DFLASH): causal over the block
                rows = torch.ones((N, P + N), dtype=torch.bool)
                rows[:, P:] = torch.tril(torch.ones((N, N), dtype=torch.bool))
            else:
                rows = mask[off: off + N * (P + N)].view(N, P + N)
                off += N * (P + N)
            for k in range(N):
                cols = [j for j in range(N) if bool(rows[k, P + j])]
                seen = [prefix[j] for j in range(P) if bool(rows[k, j])]
                path = sorted(cols, key=lambda j: int(pos[b, j]))
                ctx = seen + [int(tok[b, j]) for j in path]
                logits[b * N + k, target_next(ctx)] = 10.0
                hidden[b * N + k] = torch.tensor([b * N + k, float(pos[b, k]), float(tok[b, k])])
        for slot, t, p in zip(fb.out_cache_loc.tolist(), fb.input_ids.tolist(), fb.positions.tolist()):
            self.allocator.kv[int(slot)] = (int(t), int(p))
        self.calls.append({"bs": bs, "N": N, "spec_info": vi, "out_cache_loc": fb.out_cache_loc.clone(),
                           "forward_batch_type": type(fb).__name__})
        out = SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
        return SimpleNamespace(logits_output=out, can_run_cuda_graph=False)


class OracleDrafter:
    """The draft runner's forward: hidden states whose logits (through an identity
    LM head) put the target's greedy continuation at rank ``truth_rank[d]`` of
    depth d, and distinct decoys elsewhere, so trees contain deep true paths,
    siblings and misses.  Records the block it was given (tokens, positions)."""

    def __init__(self, batch_ref, block, truth_rank, seed=0):
        self.batch_ref = batch_ref
        self.block = block
        self.truth_rank = truth_rank
        self.g = torch.Generator().manual_seed(seed)
        self.token_to_kv_pool = None
        self.req_to_token_pool = None
        self.attn_backend = None
        self.blocks = []

    def logits(self, reqs):
        bs = len(reqs)
        H = torch.full((bs, self.block, VOCAB), -30.0)
        for b, req in enumerate(reqs):
            truth = greedy_reference(req.tokens(), self.block - 1)
            for d in range(1, self.block):
                order = torch.randperm(VOCAB, generator=self.g).tolist()
                order.remove(truth[d - 1])
                r = self.truth_rank[(d - 1) % len(self.truth_rank)]
                order.insert(r, truth[d - 1])
                for rank, t in enumerate(order):
                    H[b, d, t] = -1.0 * rank - 0.01 * d
        return H

    def forward(self, forward_batch):
        batch = self.batch_ref[0]
        self.blocks.append({"input_ids": forward_batch.input_ids.tolist(), "positions": forward_batch.positions.tolist(),
                            "out_cache_loc": forward_batch.out_cache_loc.tolist()})
        H = self.logits(batch.reqs)
        return SimpleNamespace(logits_output=SimpleNamespace(hidden_states=H.view(-1, VOCAB)), can_run_graph=False)


class DraftKV:
    """The draft model's one stand-in layer and its KV pool: records, per slot, the
    (feature row, position) DFlash's prefix-valid append writes, and when."""

    def __init__(self, events):
        self.slots = {}
        self.events = events
        layer_attn = SimpleNamespace(
            kv_proj_only=lambda h: (h.clone(), h.clone()),
            apply_k_norm=lambda k: k,
            apply_k_rope=lambda positions, k: torch.cat([k[:, :1], positions.view(-1, 1).to(k.dtype), k[:, 2:]], 1),
            num_kv_heads=1,
            head_dim=3,
            attn=SimpleNamespace(k_scale=None, v_scale=None),
        )
        self.model = SimpleNamespace(layers=[SimpleNamespace(self_attn=layer_attn)], project_target_hidden=lambda x: x,
                                     prepare_context_hidden_for_kv=lambda layer, h: h)
        self.pool = SimpleNamespace(set_kv_buffer=self.set_kv_buffer, set_kv_buffer_prefix_valid=self.set_kv_buffer_prefix_valid)

    def set_kv_buffer(self, layer, loc, k, v, k_scale, v_scale):
        self.events.append("draft_kv")
        for s, row in zip(loc.tolist(), k.view(len(loc), -1).tolist()):
            self.slots[int(s)] = (int(row[0]), int(row[1]))

    def set_kv_buffer_prefix_valid(self, layer, cache_loc_2d, commit_lens, k, v, k_scale, v_scale):
        """MHATokenToKVPool.set_kv_buffer_prefix_valid: row i of request b only for i < commit_lens[b]."""
        self.events.append("draft_kv")
        bs, W = cache_loc_2d.shape
        rows = k.view(bs, W, -1)
        for b in range(bs):
            for i in range(int(commit_lens[b])):
                self.slots[int(cache_loc_2d[b, i])] = (int(rows[b, i, 0]), int(rows[b, i, 1]))


class MambaBackend:
    """The target attention backend: records update_mamba_state_after_mtp_verify
    and the eager metadata init of the verify."""

    def __init__(self):
        self.commits = []
        self.inits = []

    def init_forward_metadata(self, forward_batch):
        self.inits.append(type(forward_batch.spec_info).__name__)

    def update_mamba_state_after_mtp_verify(self, last_correct_step_indices, mamba_track_indices, mamba_steps_to_track,
                                            model, req_pool_indices=None):
        self.commits.append(last_correct_step_indices.tolist())


# ----------------------------------------------------------------- kernels

def kernel_fakes(record):
    """The GPU kernels the spec-v2 workers and EAGLE's verify call, by their CPU equivalents."""

    def verify_tree_greedy_func(predicts, accept_index, accept_token_num, candidates, retrieve_index,
                                retrieve_next_token, retrieve_next_sibling, target_predict, topk=-1):
        args = (predicts, accept_index, accept_token_num, candidates, retrieve_index,
                retrieve_next_token, retrieve_next_sibling, target_predict)
        kref.check_verify_tree_greedy(*args)
        record.append({
            "candidates": candidates.clone(), "retrieve_next_token": retrieve_next_token.clone(),
            "retrieve_next_sibling": retrieve_next_sibling.clone(), "accept_width": accept_index.shape[1],
        })
        kref.verify_tree_greedy_reference(*args)
        record[-1].update(accept_index=accept_index.clone(), accept_token_num=accept_token_num.clone(),
                          predicts=predicts.clone())
        return predicts, accept_index, accept_token_num

    def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                              retrive_next_token, retrive_next_sibling, uniform_samples,
                                              uniform_samples_for_final_sampling, target_probs, draft_probs,
                                              threshold_single, threshold_acc, deterministic=True):
        kref.check_tree_speculative_sampling_target_only(
            predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,
            threshold_single, threshold_acc)
        record.append({"sampling": True, "draft_probs_all_zero": bool((draft_probs == 0).all()),
                       "threshold_single": threshold_single, "threshold_acc": threshold_acc})
        # The toy target's distributions are one-hot up to e^-20: the kernel's walk is the
        # greedy walk over the most probable token (its coins cannot change it).
        target_predict = target_probs.argmax(-1).to(torch.int64)
        kref.verify_tree_greedy_reference(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, target_predict)
        record[-1].update(accept_index=accept_index.clone(), accept_token_num=accept_token_num.clone(),
                          predicts=predicts.clone())

    def assign_extend_cache_locs_func(req_pool_indices, req_to_token, start_offset, end_offset, batch_size,
                                      draft_token_num, device):
        """kernels/ops/speculative/cache_locs: req_to_token[r, start:end] of every request, concatenated."""
        out = [req_to_token[int(r), int(s):int(e)] for r, s, e in zip(req_pool_indices, start_offset, end_offset)]
        return torch.cat(out).to(torch.int64)

    def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out, width):
        o = 0
        for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
            out[o:o + e - s] = req_to_token[r, s:e]
            o += e - s

    def fill_accept_out_cache_loc_func(accept_index, out_cache_loc, accept_out_cache_loc, size):
        """kernels/ops/speculative/eagle.fill_accept_out_cache_loc: the accepted slots, packed."""
        flat = [int(i) for i in accept_index.reshape(-1).tolist() if int(i) != -1]
        for dst, src in enumerate(flat):
            accept_out_cache_loc[dst] = out_cache_loc[src]

    def fill_front_out_cache_loc_func(num_front, out_cache_loc, front_out_cache_loc):
        """kernels/ops/speculative/cache_locs (v0.5.23): the first num_front[i] slots of request
        i's window in out_cache_loc, packed."""
        window = out_cache_loc.view(num_front.numel(), -1)
        flat = [int(s) for i, n in enumerate(num_front.tolist()) for s in window[i, :n].tolist()]
        front_out_cache_loc[: len(flat)] = torch.tensor(flat, dtype=front_out_cache_loc.dtype)

    return {
        "fill_front_out_cache_loc_func": fill_front_out_cache_loc_func,
        "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only,
        "top_k_renorm_prob": lambda probs, top_ks: probs,  # top_k = VOCAB: no cut
        "top_p_renorm_prob": lambda probs, top_ps: probs,
        "verify_tree_greedy_func": verify_tree_greedy_func,
        "assign_extend_cache_locs_func": assign_extend_cache_locs_func,
        "assign_extend_cache_locs_cpu": assign_extend_cache_locs_cpu,
        "fill_accept_out_cache_loc_func": fill_accept_out_cache_loc_func,
        "alloc_for_spec_decode": alloc_for_spec_decode,
        "ForwardBatch": ForwardBatch,
        "GenerationBatchResult": GenerationBatchResult,
        "ForwardMode": ForwardMode,
        "CaptureHiddenMode": CaptureHiddenMode,
        "is_pin_memory_available": lambda device=None: False,
        "get_tp_group": lambda: SimpleNamespace(world_size=1),
        "is_dflash_sampling_verify_available": lambda: False,
    }
