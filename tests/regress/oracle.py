"""An independent re-derivation of every cell of the regression matrix.

Pure arithmetic on the numbers of the scenario files, following the formulas
of each release's sizing code as read by hand (docs/results/regress.md, "The oracle:
each cell re-derived").  It deliberately imports neither the harness
(``sgl_overlay``) nor SGLang: ``test_matrix.py`` compares what it computes with
what the harness reports from running the release's real code, so the two can
only agree when both are right (or wrong the same way, which the hand
derivation in docs/results/regress.md guards against).

What varies between releases, each fact read in the release's own code
(the file and function are named in docs/results/regress.md):

* ``QWEN35_SINCE``: ``configs/qwen3_5.py`` (the Qwen3.5/3.6 config class) exists;
* ``DFLASH_SINCE``: ``SpeculativeAlgorithm`` has ``DFLASH``;
* ``VALUE_SINCE``: ``_profile_available_bytes`` refuses a non-positive KV budget
  with "Raise --mem-fraction-static above ceil(1000 (1 - available/pre))/1000"
  (before: "Not enough memory", no value);
* ``mamba_era``: how ``handle_max_mamba_cache`` reserves the speculative
  intermediate states and solves for the Mamba slots ("running": v0.5.11-
  v0.5.12.post1; "capped": v0.5.13-v0.5.16; "padded": v0.5.17+);
* ``OVERLAP_KEPT_SINCE``: DFLASH no longer forces ``disable_overlap_schedule``
  (the ping-pong extra buffer then takes 2 slots per request, not 1);
* ``MM_RESERVE_SINCE``: 100 MiB (``SGLANG_VLM_CACHE_SIZE_MB``) of the KV budget
  reserved for a multimodal model (``mm_runtime_reservation_gb``);
* ``REQS_BY_TOKENS_SINCE``: an explicit ``--max-running-requests`` is capped by
  ``tokens // 2`` (before: by the 2048..4096 estimate);
* ``DRAFTER_FIRST_SINCE``: ``Scheduler.init_model_worker`` starts the drafter
  (``maybe_init_draft_worker``) before it sizes the pools (``init_memory_pools``),
  so the sizing's free-memory reading is the target's post-load one less the
  drafter's footprint (the scenario's ``[draft] weights_gib``); before, the
  target's ``ModelRunner`` sized its pools before any drafter existed.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1 << 30
SCENARIOS = Path(__file__).resolve().parents[2] / "tools" / "sgl_overlay" / "harness" / "scenarios"

QWEN35_SINCE = (0, 5, 9)
DFLASH_SINCE = (0, 5, 11)
VALUE_SINCE = (0, 5, 14)
CAPPED_SINCE = (0, 5, 13)
PADDED_SINCE = (0, 5, 17)
OVERLAP_KEPT_SINCE = (0, 5, 14)
MM_RESERVE_SINCE = (0, 5, 18)
REQS_BY_TOKENS_SINCE = (0, 5, 14)
DRAFTER_FIRST_SINCE = (0, 5, 14)
# From v0.5.20 the parser no longer declares --mamba-scheduler-strategy (a deprecated alias of
# --mamba-radix-cache-strategy in v0.5.17's server_args.py; test_oracle reads it from each release's
# code), and v0.5.23 not --cuda-graph-max-bs (an alias of --cuda-graph-max-bs-decode there; v0.5.23:
# "ambiguous option"): argparse refuses them
OLD_FLAGS_REFUSED_SINCE = (0, 5, 20)
OLD_FLAGS = ("mamba_scheduler_strategy", "cuda_graph_max_bs")
RUNTIME_REFUSAL_SINCE = (0, 5, 13)  # "state cache is too small to serve any requests"
DFLASH_DEFAULT_REQUESTS = 48        # what DFLASH sets an unset --max-running-requests to
KV_BYTES = {"auto": 2, "bfloat16": 2, "bf16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


def version(v: str) -> tuple:
    return tuple(int(x) for x in v.replace(".post", ".").split("."))[:3]


def load(name: str) -> dict:
    return tomllib.loads((SCENARIOS / f"{name}.toml").read_text(encoding="utf-8"))


@dataclass
class Cell:
    """What the release does with the scenario."""

    outcome: str                      # ok | broken | refused | untestable
    reason: str = ""                  # a fragment of the report's reason
    figures: dict = field(default_factory=dict)
    remedy: float | None = None       # the mem-fraction-static value a refusal names
    remedy_works: bool | None = None  # None: no value, or already satisfied
    passed: bool | None = None


def reading_gib(v: tuple, sc: dict) -> float:
    """The free memory the sizing reads after the weights: the target's post-load reading,
    less the drafter's footprint where the release starts the drafter first."""
    post = sc["gpu"]["post_load_free_gib"]
    if v >= DRAFTER_FIRST_SINCE and sc["server"].get("speculative_algorithm"):
        post -= (sc.get("draft") or {}).get("weights_gib", 0)
    return post


def available_gib(v: tuple, sc: dict, mfs: float) -> float:
    """The sizing's post-load reading minus the (1 - mem_fraction_static) slack of the pre-load free memory."""
    return reading_gib(v, sc) - sc["gpu"]["pre_load_free_gib"] * (1 - mfs)


def suggested_mfs(v: tuple, sc: dict) -> float:
    return math.ceil(1000 * (1 - reading_gib(v, sc) / sc["gpu"]["pre_load_free_gib"])) / 1000


def dense_cell_bytes(model: dict, server: dict) -> int:
    """layers x (KV heads / TP) x head_dim x 2 (K and V) x KV dtype bytes."""
    heads = max(1, model["num_key_value_heads"] // int(server.get("tp_size", 1)))
    return model["num_hidden_layers"] * heads * model["head_dim"] * 2 * KV_BYTES[server.get("kv_cache_dtype", "auto")]


def hybrid_cell_bytes(sc: dict) -> int:
    """Full-attention layers of the target plus the DFlash drafter's layers (if the scenario
    has one), each KV heads x head_dim x 2 x KV dtype bytes (the drafter's pool takes the
    target's KV dtype)."""
    t, d, s = sc["model"]["text_config"], sc.get("draft"), sc["server"]
    kv = KV_BYTES[s.get("kv_cache_dtype", "auto")]
    attn_layers = t["num_hidden_layers"] // t["full_attention_interval"]
    target = attn_layers * t["num_key_value_heads"] * t["head_dim"] * 2 * kv
    draft = d["num_hidden_layers"] * d["num_key_value_heads"] * d["head_dim"] * 2 * kv if d else 0
    return target + draft


def mamba_bytes_per_request(sc: dict, conv_bytes: int = 2) -> int:
    """Gated-DeltaNet state per request over all linear-attention layers:
    conv state (conv_dim x (kernel - 1) x ``conv_bytes``: 2, bf16, the release's default
    ``SGLANG_MAMBA_CONV_DTYPE``; 4 under ``SGLANG_MAMBA_CONV_DTYPE=float32``,
    ``configs/mamba_utils.py`` ``mamba2_state_dtype``) + SSM state
    (value heads x key dim x value dim x 4 B, float32)."""
    t = sc["model"]["text_config"]
    layers = t["num_hidden_layers"] - t["num_hidden_layers"] // t["full_attention_interval"]
    conv_dim = (2 * t["linear_num_key_heads"] * t["linear_key_head_dim"]
                + t["linear_num_value_heads"] * t["linear_value_head_dim"])
    conv = conv_dim * (t["linear_conv_kernel_dim"] - 1) * conv_bytes
    ssm = t["linear_num_value_heads"] * t["linear_key_head_dim"] * t["linear_value_head_dim"] * 4
    return layers * (conv + ssm)


def estimated_requests(tokens: int, context_len: int) -> int:
    return max(min(int(tokens / context_len * 512), 4096), 2048)


def refusal(v: tuple, sc: dict) -> Cell:
    if v >= VALUE_SINCE:
        return Cell("refused", "Loaded weights leave no GPU memory", remedy=suggested_mfs(v, sc))
    return Cell("refused", "Not enough memory")


def dense(v: tuple, sc: dict, mfs: float) -> Cell:
    rest = available_gib(v, sc, mfs)
    if rest <= 0:
        return refusal(v, sc)
    tokens = int(rest * GIB) // dense_cell_bytes(sc["model"], sc["server"])
    requests = min(estimated_requests(tokens, sc["model"]["context_len"]), tokens // 2)
    return Cell("ok", figures={"max_total_num_tokens": tokens, "max_running_requests": requests})


def mamba_ratio(v: tuple, s: dict) -> int:
    """Mamba slots per running request: 1 without the radix cache; else 3, plus
    the extra buffer's ping-pong slots (2 with the overlap scheduler, 1 without)."""
    if s.get("disable_radix_cache"):
        return 1
    if s.get("mamba_scheduler_strategy") != "extra_buffer":
        return 3
    overlap = v >= OVERLAP_KEPT_SINCE  # DFLASH turned the overlap scheduler off before
    return 3 + (2 if overlap else 1)


def hybrid_dflash(v: tuple, sc: dict, mfs: float) -> Cell:
    s, model = sc["server"], sc["model"]
    per_req = mamba_bytes_per_request(sc)
    draft_tokens = s["speculative_dflash_block_size"]   # DFLASH: num draft tokens = the block size
    running = s.get("max_running_requests", DFLASH_DEFAULT_REQUESTS)
    ratio = mamba_ratio(v, s)
    pad = 1 if v >= PADDED_SINCE else 0                 # the pool's padding slot, counted from v0.5.17
    rest = available_gib(v, sc, mfs)
    if v >= MM_RESERVE_SINCE:
        rest -= 100 / 1024                              # Qwen3.5/3.6 is multimodal
    if v < CAPPED_SINCE:                                # the intermediate states for every running request, first
        rest -= per_req * running * draft_tokens / GIB
    if s.get("max_mamba_cache_size") is not None:
        slots = s["max_mamba_cache_size"]
        if v >= CAPPED_SINCE:
            rest -= per_req * (min(running, slots // ratio) + pad) * draft_tokens / GIB
    elif s.get("disable_radix_cache"):
        slots = running
        if v >= CAPPED_SINCE:
            rest -= per_req * (slots + pad) * draft_tokens / GIB
    else:
        budget = rest * s["mamba_full_memory_ratio"] / (1 + s["mamba_full_memory_ratio"]) * GIB
        if v < CAPPED_SINCE:
            slots = int(budget // per_req)
        else:
            slots = int((budget - per_req * (1 + draft_tokens) * pad) // (per_req * (1 + draft_tokens / ratio)))
            rest -= per_req * (min(running, slots // ratio) + pad) * draft_tokens / GIB
    if slots <= 0 and v >= CAPPED_SINCE:
        return Cell("refused", "Not enough GPU memory for hybrid")
    rest -= (slots + pad) * per_req / GIB
    if rest <= 0:
        return refusal(v, sc)
    tokens = int(rest * GIB) // hybrid_cell_bytes(sc)
    cap = tokens // 2 if v >= REQS_BY_TOKENS_SINCE else estimated_requests(tokens, model["context_len"])
    requests = min(min(running, cap), slots // ratio)
    figures = {"max_mamba_cache_size": slots, "max_total_num_tokens": tokens, "max_running_requests": requests}
    if requests <= 0:
        if v >= RUNTIME_REFUSAL_SINCE:
            return Cell("refused", "state cache is too small to serve any requests")
        return Cell("broken", figures=figures)
    return Cell("ok", figures=figures)


def _size(v: tuple, sc: dict, mfs: float) -> Cell:
    old = [k for k in OLD_FLAGS if k in sc["server"]]
    if old and v >= OLD_FLAGS_REFUSED_SINCE:
        return Cell("untestable", f"own parser refuses [server] {old[0]}")
    if sc["model"].get("kind", "dense") == "dense":
        return dense(v, sc, mfs)
    if v < QWEN35_SINCE:
        return Cell("untestable", "Qwen3.5/3.6 config class")
    if sc["server"].get("speculative_algorithm") == "DFLASH" and v < DFLASH_SINCE:
        return Cell("untestable", "no speculative algorithm 'DFLASH'")
    return hybrid_dflash(v, sc, mfs)


def expect(release: str, name: str) -> Cell:
    """The cell (release, scenario), judged by the scenario's own [expect] table:
    the outcome must be listed; a refusal passes only with a value that is
    above the scenario's mem-fraction-static and whose re-run is ok."""
    v, sc = version(release), load(name)
    mfs = float(sc["server"]["mem_fraction_static"])
    cell = _size(v, sc, mfs)
    if cell.outcome == "untestable":
        return cell
    want = sc["expect"]
    if cell.outcome == "refused" and cell.remedy is not None:
        if cell.remedy > mfs:
            rerun = _size(v, sc, cell.remedy)
            cell.remedy_works = rerun.outcome == "ok"
            cell.figures["rerun"] = rerun.figures
    cell.passed = cell.outcome in want["pass"] and (
        cell.outcome != "refused" or want.get("remedy") != "works" or bool(cell.remedy_works))
    return cell
