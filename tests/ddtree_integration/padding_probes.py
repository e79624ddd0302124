"""A target verify's padding at a CUDA-graph replay, through the pin's own
replay path (run in a fresh interpreter by child.py,
``module="tests.ddtree_integration.padding_probes"``).

From v0.5.14 (2411737244, #28579) the decode graph runner hands the backends a
view of the padded batch whose ``num_padding`` is ``bs - raw_bs``
(runner/decode_cuda_graph_runner.py ``build_replay_fb_view``), and
``MambaAttnBackendBase.init_forward_metadata_out_graph`` takes it instead of
counting the rows whose sequence length is the fill value.
"""

from __future__ import annotations

from types import SimpleNamespace

from tests.ddtree_integration.probes import _install, _linear_backend, _mamba_slot

RUNNER = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"
HYBRID = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
MODULES = [RUNNER, HYBRID, "sglang.srt.model_executor.forward_batch_info", "sglang.srt.speculative.spec_info",
           "sglang.srt.speculative.dflash_info", "sglang.srt.layers.attention.mamba.mamba2_metadata"]


def _padded(seq_lens, bs, fill):
    """Request-pool indices and sequence lengths as a replay hands them to the backend:
    the requests, then padding rows of request 0 at the fill value."""
    import torch

    raw_bs = len(seq_lens)
    reqs = torch.tensor([3, 5, 6, 2, 7][:raw_bs] + [0] * (bs - raw_bs), dtype=torch.int64)
    seq = torch.tensor(list(seq_lens) + [fill] * (bs - raw_bs), dtype=torch.int64)
    return reqs, seq


def _replayed(backend, reqs, raw_bs, bs, N) -> dict:
    """The backend's replay metadata beside what it should be: each request's own Mamba
    slot and query range, -1 and an empty range for each padding row."""
    return {
        "state_indices": backend.forward_metadata.mamba_cache_indices.tolist(),
        "expected_state_indices": _mamba_slot(reqs[:raw_bs]).tolist() + [-1] * (bs - raw_bs),
        "query_start_loc": backend.forward_metadata.query_start_loc.tolist(),
        "expected_query_start_loc": [i * N for i in range(raw_bs + 1)] + [raw_bs * N] * (bs - raw_bs),
    }


def chain_verify_replay(root: str, seq_lens=(9, 1, 5), bs=4, draft_tokens=4, drop_num_padding=False) -> dict:
    """A chain target verify (DFLASH's ``DFlashVerifyInput``) of ``len(seq_lens)``
    requests replayed in a graph captured for ``bs``: the view the pin's runner
    builds (``build_replay_fb_view`` over buffers filled as the runner fills
    them: the requests, then padding rows of request 0 at the fill value), then
    the real ``MambaAttnBackendBase`` metadata from it: every row's Mamba slot
    and query range.  ``drop_num_padding``: the view without ``num_padding``,
    so that the backend counts the padding itself as before #28579 (its own
    fallback, the control that shows the check can fail)."""
    import torch

    _, loader = _install(root, MODULES)
    loader.set_fakes({"get_moe_expert_parallel_world_size": lambda: 1})
    runner = loader.load(RUNNER)
    fbi = loader.load("sglang.srt.model_executor.forward_batch_info")
    hyb = loader.load(HYBRID)
    info_mod = loader.load("sglang.srt.speculative.dflash_info")
    N, raw_bs = draft_tokens, len(seq_lens)
    backend = object.__new__(hyb.MambaAttnBackendBase)
    pool = SimpleNamespace(get_mamba_indices=_mamba_slot, translate_mamba_indices=lambda x: x)
    hyb.MambaAttnBackendBase.__init__(backend, SimpleNamespace(
        device="cpu", is_draft_worker=False, req_to_token_pool=pool, token_to_kv_pool=None,
        server_args=SimpleNamespace(speculative_eagle_topk=1, enable_unified_memory=False)))
    backend._replayssm_enabled = lambda: False
    backend.init_cuda_graph_state(bs, bs * N)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    reqs, seq = _padded(seq_lens, bs, fill)
    buffers = SimpleNamespace(input_ids=torch.zeros(bs * N, dtype=torch.int64),
                              positions=torch.zeros(bs * N, dtype=torch.int64), req_pool_indices=reqs,
                              seq_lens=seq, seq_lens_cpu=seq.clone(), encoder_lens=None, mamba_track_indices=None)
    info = info_mod.DFlashVerifyInput(draft_token=torch.arange(raw_bs * N), positions=torch.arange(raw_bs * N),
                                      draft_token_num=N)
    batch = SimpleNamespace(forward_mode=fbi.ForwardMode.TARGET_VERIFY, seq_lens_sum=int(sum(seq_lens)),
                            seq_lens_cpu=torch.tensor(list(seq_lens)), spec_info=info, batch_size=raw_bs)
    view = runner.build_replay_fb_view(batch, buffers, bs, raw_bs, bs * N, fill, fbi.ForwardMode.TARGET_VERIFY,
                                       False)
    if drop_num_padding:
        del view.num_padding
    backend.init_forward_metadata_out_graph(view)
    return dict(_replayed(backend, reqs, raw_bs, bs, N), fill=fill, num_padding=getattr(view, "num_padding", None))


def chain_verify_replay_before_28579(root: str, seq_lens=(9, 1, 5), bs=4, draft_tokens=4) -> dict:
    """The same verify on a release before #28579 (v0.5.12.post1), through that
    release's own entry point: ``init_forward_metadata_replay_cuda_graph`` with
    what its ``CudaGraphRunner.replay_prepare`` hands the backend (the requests,
    then padding rows of request 0 at the fill value); the backend counts the
    padding itself."""
    import torch

    _, loader = _install(root, MODULES[1:])
    loader.set_fakes({"get_moe_expert_parallel_world_size": lambda: 1})
    fbi = loader.load("sglang.srt.model_executor.forward_batch_info")
    hyb = loader.load(HYBRID)
    info_mod = loader.load("sglang.srt.speculative.dflash_info")
    N, raw_bs = draft_tokens, len(seq_lens)
    backend = _linear_backend(hyb, SimpleNamespace(speculative_eagle_topk=1, speculative_num_draft_tokens=N))
    backend.init_cuda_graph_state(bs, bs * N)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    reqs, seq = _padded(seq_lens, bs, fill)
    info = info_mod.DFlashVerifyInput(draft_token=torch.arange(raw_bs * N), positions=torch.arange(raw_bs * N),
                                      draft_token_num=N)
    backend.init_forward_metadata_replay_cuda_graph(bs, reqs.clone(), seq, int(seq.sum()), None,
                                                    fbi.ForwardMode.TARGET_VERIFY, info, seq.clone())
    return dict(_replayed(backend, reqs, raw_bs, bs, N), fill=fill)
