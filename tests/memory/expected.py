"""The memory figures of a scenario, computed here from the scenario file alone.

Independent of the tree: it restates the documented rules (docs/memory.md)
from the scenario's inputs, so the tests can hold the ledger the patched tree
writes against it.  Units: bytes (int), GiB = 2**30 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
DTYPE_BYTES = {"auto": None, "bfloat16": 2, "bf16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
MIN_POOL_TOKENS = 7  # TpModelWorker: max_req_input_len = pool - 6 > 0
DFLASH_DEFAULT_REQUESTS = 48  # ServerArgs: speculative decoding resets an unset count to 48


def budget_bytes(sc, mfs=None) -> int:
    g = sc.gpu
    m = sc.server["mem_fraction_static"] if mfs is None else mfs
    return int((g["post_load_free_gib"] - g["pre_load_free_gib"] * (1 - m)) * GIB)


def kv_bytes_per_token(sc) -> tuple[int, int]:
    """(target cell, cell with the DFlash draft KV) in bytes per token."""
    m, s = sc.model, sc.server
    tp = s.get("tp_size", 1)
    dtype = DTYPE_BYTES[s.get("kv_cache_dtype", "auto")] or 2  # the scenarios' models are bf16
    if m["kind"] == "dense":
        layers, heads, head_dim = m["num_hidden_layers"], m["num_key_value_heads"], m["head_dim"]
    else:
        t = m["text_config"]
        layers = t["num_hidden_layers"] // t["full_attention_interval"]
        heads, head_dim = t["num_key_value_heads"], t["head_dim"]
    target = max(1, heads // tp) * head_dim * 2 * layers * dtype
    if s.get("speculative_algorithm") == "DFLASH":
        d = sc.draft["num_hidden_layers"]
        return target, -(-target * (layers + d) // layers)
    return target, target


def mamba_bytes_per_slot(sc) -> int:
    """conv state (bf16) + SSM state (fp32) over the linear-attention layers."""
    t = sc.model["text_config"]
    conv = (t["linear_num_value_heads"] * t["linear_value_head_dim"]
            + 2 * t["linear_num_key_heads"] * t["linear_key_head_dim"]) * (t["linear_conv_kernel_dim"] - 1) * 2
    ssm = t["linear_num_value_heads"] * t["linear_value_head_dim"] * t["linear_key_head_dim"] * 4
    linear_layers = t["num_hidden_layers"] - t["num_hidden_layers"] // t["full_attention_interval"]
    return (conv + ssm) * linear_layers


@dataclass
class Plan:
    requests: int
    slots: int
    spec_bytes: int
    mamba_bytes: int
    kv_bytes: int
    tokens: int


def draft_tokens(sc) -> int:
    s = sc.server
    return s.get("speculative_dflash_block_size", 0) if s.get("speculative_algorithm") else 0


def mamba_ratio(sc) -> int:
    s = sc.server
    if s.get("disable_radix_cache"):
        return 1
    extra = s.get("mamba_scheduler_strategy") == "extra_buffer"
    # DFLASH turns the overlap scheduler off at v0.5.12.post1: one extra buffer.
    return 3 + (1 if extra else 0)


def reserve(sc, n: int, budget: int, overrides=None) -> Plan:
    s = dict(sc.server, **(overrides or {}))
    pr, d, r = mamba_bytes_per_slot(sc), draft_tokens(sc), mamba_ratio(sc)
    _, cell = kv_bytes_per_token(sc)
    spec = (n + 1) * d * pr if d else 0
    rest = budget - spec
    if s.get("max_mamba_cache_size") is not None:
        slots = s["max_mamba_cache_size"]
    elif s.get("disable_radix_cache"):
        slots = n * r
    else:
        f = s.get("mamba_full_memory_ratio", 0.9)
        slots = max(int(rest * f / (1 + f)) // pr - 1, 0)
    mamba = (slots + 1) * pr
    kv = rest - mamba
    return Plan(n, slots, spec, mamba, kv, kv // cell if kv > 0 else 0)


def fits(sc, p: Plan, min_tokens=None) -> bool:
    need = p.requests * draft_tokens(sc) + MIN_POOL_TOKENS if min_tokens is None else min_tokens
    return p.requests >= 1 and p.slots // mamba_ratio(sc) >= p.requests and p.tokens >= need


def requested(sc, overrides=None) -> int:
    s = dict(sc.server, **(overrides or {}))
    return s.get("max_running_requests") or DFLASH_DEFAULT_REQUESTS


def largest_fitting(sc, mfs=None, overrides=None):
    """The plan for the largest request count <= the requested one that fits, or None."""
    b = budget_bytes(sc, mfs)
    for n in range(requested(sc, overrides), 0, -1):
        p = reserve(sc, n, b, overrides)
        if fits(sc, p):
            return p
    return None


def smallest_mfs(sc, n=None) -> float:
    """Smallest mem_fraction_static (3 decimals) at which n requests (the requested
    count; 1 for dense models) fit with a KV cache of one full-context request."""
    ctx = sc.model["context_len"]
    _, cell = kv_bytes_per_token(sc)
    for k in range(1, 1000):
        b = budget_bytes(sc, k / 1000)
        if b <= 0:
            continue
        if sc.model["kind"] == "dense":
            if b // cell >= ctx:
                return k / 1000
        else:
            p = reserve(sc, n or requested(sc), b)
            if fits(sc, p, min_tokens=ctx):
                return k / 1000
    raise AssertionError("no mem_fraction_static below 1 fits")


# -- do no harm (over-budget-start.patch): the pin's pools and the reserve ----
MIB = 1 << 20


def gpu_memory_sizes(total_mib, tp_size=1) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) that v0.5.12.post1's
    ServerArgs._handle_gpu_memory_settings picks for a card of ``total_mib``
    (its table, read from server_args.py; None: its no-GPU fallback)."""
    if total_mib is None:
        return 4096, 160
    if total_mib < 20 * 1024:
        return 2048, 8
    if total_mib < 35 * 1024:
        return 2048, 24 if tp_size < 4 else 80
    if total_mib < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if total_mib < 160 * 1024:          # H100/A100 80 GB and H20/H200 rows alike
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def activation_reserve_bytes(server, total_mib=None) -> int:
    """v0.5.12.post1's own activation + CUDA-graph estimate (docs/memory.md,
    "The reserve"): ServerArgs._handle_gpu_memory_settings's ``reserved_mem`` in
    MiB without its 10 GiB floor; sizes the flags leave unset are the ones that
    method picks for the card (gpu_memory_sizes)."""
    tp = server.get("tp_size", 1)
    chunk0, graph0 = gpu_memory_sizes(total_mib, tp)
    chunk = server.get("chunked_prefill_size") or chunk0
    graph_bs = server.get("cuda_graph_max_bs") or graph0
    mib = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * 1 / 8 * 1024
    algo = server.get("speculative_algorithm")
    if algo == "STANDALONE":
        mib += 6 * 1024
    elif algo not in (None, "NGRAM"):
        mib += 4 * 1024
    return int(mib * MIB)


def pin_starts(sc, pin: dict) -> bool:
    """The pin's sizing starts: no error, >= 1 request, a pool one verify step of
    each request fits in (n x D + 7 tokens), >= 1 Mamba slot (hybrid models)."""
    if pin.get("error") or not pin.get("completed", True):
        return False
    f = pin.get("figures") or {}
    n, t = f.get("max_running_requests") or 0, f.get("max_total_num_tokens") or 0
    if n < 1 or t < n * draft_tokens(sc) + MIN_POOL_TOKENS:
        return False
    return sc.model["kind"] == "dense" or (f.get("max_mamba_cache_size") or 0) >= 1


def pin_pools(sc, requests: int, tokens: int, slots, overrides=None) -> dict:
    """What the pools allocate for the pin's figures (docs/memory.md): name ->
    reservation as the ledger states it ({"bytes", ...}); "req_to_token" is the
    request-to-token table's bytes.  Slot 0 pads the Mamba pool, the
    intermediate states have requests + 1 slots, each KV pool holds page_size
    padding tokens beyond its size."""
    s = dict(sc.server, **(overrides or {}))
    page, d = s.get("page_size", 1), draft_tokens(sc)
    target, cell = kv_bytes_per_token(sc)
    out = {"kv_cache": {"bytes": (tokens + page) * target, "tokens": tokens}}
    if cell != target:
        out["draft_kv"] = {"bytes": (tokens + page) * (cell - target), "tokens": tokens}
    if sc.model["kind"] != "dense":
        pr = mamba_bytes_per_slot(sc)
        out["mamba_states"] = {"bytes": (slots + 1) * pr, "slots": slots + 1}
        if d:
            out["speculative_intermediate_states"] = {
                "bytes": (requests + 1) * d * pr, "slots": requests + 1, "draft_tokens": d}
    out["req_to_token"] = (requests + 1) * (sc.model["context_len"] + 4 + d) * 4
    return out


def static_pool_bytes(pools: dict) -> int:
    """The pools' bytes, request table included."""
    return sum(v if isinstance(v, int) else v["bytes"] for v in pools.values())
