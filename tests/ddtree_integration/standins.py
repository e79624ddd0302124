"""CPU stand-ins for the GPU stack around one DFlash/DDTREE decode step.

Only what cannot run here is stood in: the model runners' forwards, the KV
pools and allocator, the Triton/CUDA kernels (by CPU versions of what they
compute: kernel_reference.py, ``assign_req_to_token_pool_cpu``), and the
scheduler's batch/request objects (SimpleNamespace-like, with the fields the
real worker and EagleVerifyInput.verify read).  Everything else -- the
DFlash worker, DDTREE's worker and tree logic, EagleVerifyInput's KV
allocation, acceptance bookkeeping, eviction, finish checks and EAGLE's
Mamba tree commit -- is the tree's own code, loaded by the targeted loader.

The toy target: the token after a sequence s is ``target_next(s)``, a hash of
the whole sequence; the stand-in target runs a verify forward by reading each
verify row's context from the **custom mask and positions** it is given (the
prefix columns plus the visible tree columns ordered by position), so a wrong
mask or wrong positions change the logits.  Greedy decoding of that target is
the reference the committed tokens must equal.
"""

from __future__ import annotations

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


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size):
    """What the Triton kernel assign_req_to_token_pool writes (spec_utils.py)."""
    off = 0
    for i in range(int(batch_size)):
        s, e = int(start_offset[i]), int(end_offset[i])
        req_to_token[int(req_pool_indices[i]), s:e] = out_cache_loc[off:off + e - s].to(req_to_token.dtype)
        off += e - s


class Allocator:
    """Token-slot allocator: hands out increasing slot ids, records frees."""

    def __init__(self, start=1000):
        self.next = start
        self.freed = []

    def alloc(self, n):
        out = torch.arange(self.next, self.next + n, dtype=torch.int64)
        self.next += n
        return out

    def backup_state(self):
        return self.next

    def restore_state(self, state):
        self.next = state

    def free(self, slots):
        self.freed.extend(int(x) for x in torch.as_tensor(slots).reshape(-1).tolist())


class Req:
    def __init__(self, prompt):
        self.origin_input_ids = list(prompt)
        self.output_ids = []
        self.require_reasoning = False
        self.grammar = None
        self.kv_committed_len = len(prompt)
        self.kv_allocated_len = len(prompt)
        self.spec_verify_ct = 0
        self.spec_num_correct_drafts = 0
        self.return_logprob = False

    def check_finished(self):
        pass

    def finished(self):
        return False

    def update_spec_correct_drafts_histogram(self, n):
        pass

    def tokens(self):
        return self.origin_input_ids + self.output_ids


class Mode:
    def __init__(self, name):
        self.name = name

    def is_extend(self):
        return False

    def is_idle(self):
        return False

    def is_target_verify(self):
        return self.name == "verify"


class Greedy:
    """sampling_info of an all-greedy batch."""

    def __init__(self, n):
        self.n = n
        self.is_all_greedy = True
        self.has_custom_logit_processor = False
        self.penalizer_orchestrator = SimpleNamespace(is_required=False)
        self.logit_bias = None

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
        self.need_top_p_sampling = False


class Batch:
    """The ScheduleBatch fields a DFlash/DDTREE decode step reads and writes."""

    def __init__(self, reqs, req_to_token, allocator):
        self.reqs = reqs
        bs = len(reqs)
        lens = [len(r.tokens()) - 1 for r in reqs]  # the last token is the bonus (not cached yet)
        self.seq_lens = torch.tensor(lens, dtype=torch.int64)
        self.seq_lens_cpu = torch.tensor(lens, dtype=torch.int64)
        self.seq_lens_sum = sum(lens)
        self.req_pool_indices = torch.arange(bs, dtype=torch.int64)
        self.forward_mode = Mode("decode")
        self.is_extend_in_batch = False
        self.has_grammar = False
        self.return_logprob = False
        self.sampling_info = Greedy(bs)
        self.model_config = SimpleNamespace(think_end_id=None)
        self.tree_cache = None
        self.req_to_token_pool = SimpleNamespace(req_to_token=req_to_token)
        self.token_to_kv_pool_allocator = allocator
        self.device = "cpu"
        self.mamba_track_indices = None
        self.spec_info = None
        self.out_cache_loc = None
        self.input_ids = None
        self.return_hidden_states = False

    def batch_size(self):
        return len(self.reqs)

    def get_model_worker_batch(self, seq_lens_cpu_cache=None):
        return SimpleNamespace(input_ids=self.input_ids, spec_info=self.spec_info, seq_lens=self.seq_lens.clone(),
                               out_cache_loc=self.out_cache_loc, reqs=self.reqs)


class ToyTarget:
    """The target's verify forward (TARGET_VERIFY), from the custom mask and positions.

    hidden_states row r = [r, position, token] (float), standing for the DFlash
    context features of verify row r."""

    def __init__(self):
        self.calls = []

    def forward_batch_generation(self, mwb, is_verify=False, **kw):
        vi = mwb.spec_info
        bs = len(mwb.reqs)
        N = vi.draft_token_num
        tok = vi.draft_token.view(bs, N)
        pos = vi.positions.view(bs, N)
        mask = vi.custom_mask
        logits = torch.full((bs * N, VOCAB), -10.0)
        hidden = torch.zeros((bs * N, 3))
        off = 0
        for b, req in enumerate(mwb.reqs):
            prefix = req.tokens()[:-1]
            P = len(prefix)
            assert int(mwb.seq_lens[b]) == P
            rows = mask[off: off + N * (P + N)].view(N, P + N)
            off += N * (P + N)
            for k in range(N):
                cols = [j for j in range(N) if bool(rows[k, P + j])]
                seen = [prefix[j] for j in range(P) if bool(rows[k, j])]
                path = sorted(cols, key=lambda j: int(pos[b, j]))
                ctx = seen + [int(tok[b, j]) for j in path]
                logits[b * N + k, target_next(ctx)] = 10.0
                hidden[b * N + k] = torch.tensor([b * N + k, float(pos[b, k]), float(tok[b, k])])
        self.calls.append({"bs": bs, "N": N, "spec_info": vi, "out_cache_loc": mwb.out_cache_loc.clone()})
        out = SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
        return SimpleNamespace(logits_output=out, can_run_cuda_graph=False)


class OracleDrafter:
    """The draft runner's forward: hidden states whose logits (through an identity
    LM head) put the target's greedy continuation at rank ``truth_rank[d]`` of
    depth d, and distinct decoys elsewhere, so trees contain deep true paths,
    siblings and misses."""

    def __init__(self, batch_ref, block, truth_rank, seed=0):
        self.batch_ref = batch_ref
        self.block = block
        self.truth_rank = truth_rank
        self.g = torch.Generator().manual_seed(seed)
        self.token_to_kv_pool_allocator = None
        self.req_to_token_pool = None
        self.token_to_kv_pool = None
        self.attn_backend = None

    def forward(self, forward_batch):
        batch = self.batch_ref[0]
        bs = batch.batch_size()
        H = torch.full((bs, self.block, VOCAB), -30.0)
        for b, req in enumerate(batch.reqs):
            truth = greedy_reference(req.tokens(), self.block - 1)
            for d in range(1, self.block):
                order = torch.randperm(VOCAB, generator=self.g).tolist()
                order.remove(truth[d - 1])
                r = self.truth_rank[(d - 1) % len(self.truth_rank)]
                order.insert(r, truth[d - 1])
                for rank, t in enumerate(order):
                    H[b, d, t] = -1.0 * rank - 0.01 * d
        return SimpleNamespace(logits_output=SimpleNamespace(hidden_states=H.view(bs * self.block, VOCAB)))


class DraftKV:
    """The draft model's one stand-in layer and its KV pool: records, per slot, the
    (feature row, position) the real _append_target_hidden_sequential writes."""

    def __init__(self):
        self.slots = {}
        layer_attn = SimpleNamespace(
            kv_proj_only=lambda h: (h.clone(), h.clone()),
            apply_k_norm=lambda k: k,
            apply_k_rope=lambda positions, k: torch.cat([k[:, :1], positions.view(-1, 1).to(k.dtype), k[:, 2:]], 1),
            num_kv_heads=1,
            head_dim=3,
            attn=SimpleNamespace(k_scale=None, v_scale=None),
        )
        self.model = SimpleNamespace(layers=[SimpleNamespace(self_attn=layer_attn)], project_target_hidden=lambda x: x)
        self.pool = SimpleNamespace(set_kv_buffer=self.set_kv_buffer)

    def set_kv_buffer(self, layer, loc, k, v, k_scale, v_scale):
        for s, row in zip(loc.tolist(), k.view(len(loc), -1).tolist()):
            self.slots[int(s)] = (int(row[0]), int(row[1]))


class MambaBackend:
    """The target attention backend: records update_mamba_state_after_mtp_verify."""

    def __init__(self):
        self.commits = []

    def update_mamba_state_after_mtp_verify(self, last_correct_step_indices, mamba_track_indices, mamba_steps_to_track, model):
        self.commits.append(last_correct_step_indices.tolist())


def kernel_fakes(record):
    """The GPU kernels eagle_info / dflash call, by their CPU equivalents."""

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

    return {
        "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only,
        "top_k_renorm_prob": lambda probs, top_ks: probs,  # top_k = VOCAB: no cut
        "top_p_renorm_prob": lambda probs, top_ps: probs,
        "verify_tree_greedy_func": verify_tree_greedy_func,
        "assign_req_to_token_pool_func": assign_req_to_token_pool_cpu,
        "alloc_token_slots": None,  # set per batch (the batch's allocator)
        "SIMULATE_ACC_LEN": -1.0,
        "TREE_SPEC_KERNEL_AVAILABLE": True,
        "get_tp_group": lambda: SimpleNamespace(world_size=1),
        "is_dflash_sampling_verify_available": lambda: False,
        "get_global_server_args": lambda: SimpleNamespace(enable_mamba_extra_buffer=lambda: False,
                                                          speculative_accept_threshold_single=1.0,
                                                          speculative_accept_threshold_acc=1.0),
    }
