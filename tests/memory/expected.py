"""The memory figures of a scenario, computed here from the scenario file alone.

Independent of the tree: it restates the documented rules (docs/memory.md) of
the pin (SGLang v0.5.17) and of the memory patches from the scenario's inputs,
so the tests can hold the ledger the patched tree writes against it.  Units:
bytes (int), GiB = 2**30 bytes.  The Mamba state size per slot is a model
figure restated here too (``mamba_bytes_per_slot``); the tests also check it
against the tree's own ``mamba_cache_per_req``.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20
DTYPE_BYTES = {"auto": None, "bfloat16": 2, "bf16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
MIN_POOL_TOKENS = 7  # the scheduler: max_req_input_len = pool - 6 > 0
SPEC_DEFAULT_REQUESTS = 48  # arg_groups/speculative_hook.py: an unset count under speculative decoding


def drafter_gib(sc) -> float:
    """The drafter's footprint at the sizing's reading: from v0.5.14 the draft
    worker loads it before the target sizes the KV cache (sgl-project/sglang#23862,
    #28855), so the reading is the target's post-load one less it ([draft] weights_gib)."""
    return (sc.draft or {}).get("weights_gib", 0) if sc.server.get("speculative_algorithm") else 0


def post_load_free_bytes(sc) -> int:
    return int((sc.gpu["post_load_free_gib"] - drafter_gib(sc)) * GIB)


def budget_bytes(sc, mfs=None) -> int:
    g = sc.gpu
    m = sc.server["mem_fraction_static"] if mfs is None else mfs
    return int((g["post_load_free_gib"] - drafter_gib(sc) - g["pre_load_free_gib"] * (1 - m)) * GIB)


def kv_bytes_per_token(sc) -> tuple[int, int]:
    """(target cell, cell with the DFlash draft KV) in bytes per token: the
    draft's share scaled by its layer count, rounded up (dflash_utils
    scale_kv_cell_size_per_token_for_dflash, no draft cell given)."""
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


def draft_tokens(sc) -> int:
    s = sc.server
    return s.get("speculative_dflash_block_size", 0) if s.get("speculative_algorithm") else 0


def spec_bytes_per_slot(sc) -> int:
    """One slot's speculative intermediate states as MambaPool (v0.5.17) allocates them: an SSM
    state per draft token, and the conv windows of a linear draft chain (DFLASH) as one shared
    window of D + K - 2 columns per layer (its deduplicated layout), of a tree (DDTREE) as one
    [dim, K - 1] window per draft token."""
    d = draft_tokens(sc)
    if not d:
        return 0
    t = sc.model["text_config"]
    dim = t["linear_num_value_heads"] * t["linear_value_head_dim"] + 2 * t["linear_num_key_heads"] * t["linear_key_head_dim"]
    k = t["linear_conv_kernel_dim"]
    ssm = t["linear_num_value_heads"] * t["linear_value_head_dim"] * t["linear_key_head_dim"] * 4
    columns = d * (k - 1) if sc.server.get("speculative_algorithm") == "DDTREE" else d + k - 2
    linear_layers = t["num_hidden_layers"] - t["num_hidden_layers"] // t["full_attention_interval"]
    return (d * ssm + dim * columns * 2) * linear_layers


@dataclass(frozen=True)
class Plan:
    """What the Mamba reservation takes for ``requests`` running requests and
    ``slots`` state slots (radix cache off: one slot per request), and the KV
    tokens the rest of the budget holds."""
    requests: int
    slots: int
    state_bytes: int
    spec_bytes: int
    kv_bytes: int
    tokens: int


def reserve(sc, requests: int, budget: int, slots=None, padding=True) -> Plan:
    """The pin's reservation with the radix cache off (the scenarios here):
    (slots + 1) state slots and (min(requests, slots) + 1) x draft tokens of
    intermediate states (59ef3b15cc, #32184: the pools' padding slot is reserved),
    those as the pools allocate them (spec_bytes_per_slot, the stack's
    memory-reserve-the-speculative-conv-windows.patch; the pin reserves D x per_req);
    ``padding=False``: without the padding slots, the arithmetic up to v0.5.16 (the
    over-budget start's reference)."""
    pad = 1 if padding else 0
    pr = mamba_bytes_per_slot(sc)
    _, cell = kv_bytes_per_token(sc)
    slots = requests if slots is None else slots
    state = (slots + pad) * pr
    spec = (min(requests, slots) + pad) * spec_bytes_per_slot(sc)
    kv = budget - state - spec
    return Plan(requests, slots, state, spec, kv, kv // cell if kv > 0 else 0)


def fits(sc, p: Plan) -> bool:
    """Every request has its slot and the KV cache holds one verify step of each."""
    return p.requests >= 1 and p.slots >= p.requests and p.tokens >= p.requests * draft_tokens(sc) + MIN_POOL_TOKENS


def largest_fitting(sc, requested=None, mfs=None, slots=None):
    """The plan for the largest request count <= the requested one that fits, or None."""
    b = budget_bytes(sc, mfs)
    want = requested or sc.server.get("max_running_requests") or SPEC_DEFAULT_REQUESTS
    slots = sc.server.get("max_mamba_cache_size") if slots is None else slots
    for n in range(want, 0, -1):
        p = reserve(sc, n, b, slots)
        if fits(sc, p):
            return p
    return None


def smallest_mfs_dense(sc) -> float:
    """Smallest mem_fraction_static (3 decimals) at which a dense model's KV
    cache holds one request at the context length."""
    _, cell = kv_bytes_per_token(sc)
    for k in range(1, 1000):
        b = budget_bytes(sc, k / 1000)
        if b > 0 and b // cell >= sc.model["context_len"]:
            return k / 1000
    raise AssertionError("no mem_fraction_static below 1 fits")


def activation_reserve_bytes(tp_size: int, chunked_prefill_size: int, draft_model: bool,
                             decode_graph_bs: int | None = None) -> int:
    """SGLang's own activation + CUDA-graph estimate (docs/memory.md, "The
    reserve"): 512 + 1.5 x max(chunk, 2048) + 2 x the decode graph batch size
    (``decode_graph_bs``: a scenario's cuda_graph_max_bs, which the pin's parser takes
    as --cuda-graph-max-bs, its alias of the decode graph's; unset: 160, the estimate's
    no-GPU value) + tp / 8 x 1024 + 4096 for a draft model, MiB."""
    graph_bs = decode_graph_bs if decode_graph_bs is not None else 160
    mib = (512 + max(chunked_prefill_size, 2048) * 1.5 + 2 * graph_bs + tp_size / 8 * 1024
           + (4096 if draft_model else 0))
    return int(mib * MIB)


def resolved_flag(report: dict, flag: str, default=None):
    """The value the tree's own ServerArgs rules gave ``flag`` (the harness's
    resolution figures), else ``default`` (the scenario's)."""
    for c in report.get("figures", {}).get("resolution", []):
        if c["flag"] == flag:
            return c["resolved"]
    return default
