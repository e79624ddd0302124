"""Bytes the real pool constructors allocate, measured on torch's meta device.

After a sizing completes, the runner's own ``_apply_memory_pool_config``
(upstream's ``_init_pools``) runs with the tree's real pool classes
(``mem_cache/memory_pool.py``: ReqToTokenPool, HybridReqToTokenPool,
MambaPool, MHATokenToKVPool, HybridLinearKVPool).  A torch function mode
sends every tensor factory call (``torch.zeros``, ``torch.empty``,
``torch.arange`` ...) to the meta device, so shapes and
dtypes are the real ones and no memory is taken; it also counts every byte
asked for.  For DFlash the draft runner's KV pool (same token count, the
drafter's layers and heads) is built with the same MHATokenToKVPool class.

The mixin-bytes era (v0.5.11-v0.5.15) builds the pools with the runner's
``_init_pools`` after ``_resolve_memory_pool_config`` (``measure``); the
configurator era (v0.5.16+) with the KVCacheConfigurator's own
``_derive_pool_sizes``, ``_build_req_to_token_pool`` and
``_build_token_to_kv_pool`` (``measure_configurator``; the token allocator's
index maps are not pools the sizing budgets, and are not built).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from . import loader

FACTORIES = {
    torch.zeros, torch.empty, torch.ones, torch.full, torch.arange, torch.tensor,
    torch.zeros_like, torch.empty_like, torch.ones_like, torch.full_like,
}
POOL_CLASSES = ("ReqToTokenPool", "HybridReqToTokenPool", "MambaPool", "MHATokenToKVPool",
                "HybridLinearKVPool", "MLATokenToKVPool", "SWAKVPool", "NoOpMHATokenToKVPool")


class MetaAllocations(TorchFunctionMode):
    """Every tensor factory call goes to the meta device; the bytes are counted."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.tensors = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in FACTORIES:
            # torch.tensor(data) holds values (pointer and stride tables, a few
            # entries): built on the CPU so later ops on it need no meta kernels.
            kwargs["device"] = "cpu" if func is torch.tensor else "meta"
        out = func(*args, **kwargs)
        if func in FACTORIES and isinstance(out, torch.Tensor):
            self.bytes += out.numel() * out.element_size()
            self.tensors += 1
        return out


def _nbytes(x) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return x.numel() * x.element_size()


def _real_pools(ctx, entry_module):
    """The tree's own memory_pool module, its classes in place of the recorders
    the sizing's module holds."""
    import sys

    loader.add_real(ctx.finder, "sglang.srt.mem_cache.memory_pool")
    sys.modules.pop("sglang.srt.mem_cache.memory_pool", None)  # the stand-in the sizing imported
    # Not GPU memory: the memory-saver region tag and the (off) custom CUDA pool.
    loader.set_fakes({"GPU_MEMORY_TYPE_KV_CACHE": "kv_cache",
                      "maybe_init_custom_mem_pool": lambda *a, **k: (False, None, None)})
    pools = ctx.load("sglang.srt.mem_cache.memory_pool")
    for name in POOL_CLASSES:  # undo the recorders: the real classes, from the tree
        if name in entry_module.__dict__ and hasattr(pools, name):
            setattr(entry_module, name, getattr(pools, name))
    return pools


def measure(ctx, runner, config, entry_module) -> dict:
    """Build the pools for ``config`` with the tree's classes; bytes per pool."""
    pools = _real_pools(ctx, entry_module)
    with MetaAllocations() as rec:
        runner._apply_memory_pool_config(config)
    req_pool = object.__getattribute__(runner, "req_to_token_pool")
    kv_pool = object.__getattribute__(runner, "token_to_kv_pool")
    return _readout(ctx, rec, req_pool, kv_pool, pools, config, runner.page_size, runner.kv_cache_dtype,
                    getattr(runner, "dflash_draft_num_layers", None))


def measure_configurator(ctx, kvc, config, entry_module) -> dict:
    """The configurator era: the pools ``config`` gives, built by the
    KVCacheConfigurator's own steps with the tree's classes; bytes per pool."""
    pools = _real_pools(ctx, entry_module)
    with MetaAllocations() as rec:
        sizes = kvc._derive_pool_sizes(config=config)
        req_pool = kvc._build_req_to_token_pool(max_num_reqs=sizes.max_running_requests)
        kv_pool = kvc._build_token_to_kv_pool(sizes=sizes, is_dsa_model=False, is_dsv4_model=False,
                                              req_to_token_pool=req_pool)
    draft_layers = getattr(getattr(kvc, "spec_aux_config", None), "dflash_draft_num_layers", None)
    return _readout(ctx, rec, req_pool, kv_pool, pools, config, kvc.page_size, kvc.kv_cache_dtype, draft_layers)


def _readout(ctx, rec, req_pool, kv_pool, pools, config, page_size, kv_cache_dtype, draft_layers) -> dict:
    out = {"all_factory_bytes": rec.bytes, "tensors": rec.tensors,
           "req_to_token_bytes": _nbytes(req_pool.req_to_token)}
    mamba = getattr(req_pool, "mamba_pool", None)
    if mamba is not None:
        cache = mamba.mamba_cache
        out["mamba_states_bytes"] = _nbytes(cache.conv) + _nbytes(cache.temporal)
        out["mamba_slots"] = int(cache.temporal.shape[1])
        if hasattr(cache, "intermediate_ssm"):
            # where the pool deduplicates the conv windows (a linear draft chain on CUDA) the
            # cache holds as_strided views, logically D windows; the storage is the pool's own
            # _intermediate_conv_window_phys (one shared [dim, D + K - 2] window per slot)
            windows = getattr(mamba, "_intermediate_conv_window_phys", None) or cache.intermediate_conv_window
            out["speculative_intermediate_states_bytes"] = _nbytes(cache.intermediate_ssm) + _nbytes(windows)
            out["speculative_intermediate_slots"] = int(cache.intermediate_ssm.shape[1])
    k, v = kv_pool.get_kv_size_bytes()
    out["kv_cache_bytes"] = int(k + v)
    out["kv_pool_tokens"] = int(kv_pool.size)
    draft = ctx.req.get("draft")
    if draft and draft_layers:
        tp = int(ctx.req["server"].get("tp_size", 1))
        with MetaAllocations() as drec:
            dpool = pools.MHATokenToKVPool(
                config.max_total_num_tokens, page_size=page_size, dtype=kv_cache_dtype,
                head_num=max(1, draft["num_key_value_heads"] // tp), head_dim=draft["head_dim"],
                layer_num=draft["num_hidden_layers"], device="cuda", enable_memory_saver=False,
                enable_alt_stream=False, enable_kv_cache_copy=False)
        dk, dv = dpool.get_kv_size_bytes()
        out["draft_kv_bytes"] = int(dk + dv)
        out["all_factory_bytes"] += drec.bytes
    return {k: int(v) for k, v in out.items()}
