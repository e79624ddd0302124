"""The planner on every release v0.5.5-v0.5.23: flags parsed and resolved by each
release's own ServerArgs, the plan sized by its own code.  CI runs PLAN_CI (the eras'
ends, v0.5.20 where the declared fallbacks start, and the newest); SGLO_ALL_RELEASES=1
runs every release (as tests/regress/test_matrix.py)."""

import pytest

from sgl_overlay.planner import core, deployment

from ..regress.conftest import ALL_RELEASES, all_releases_requested
from .helpers import LLAMA8B, QWEN36

PLAN_CI = ["0.5.5", "0.5.12.post1", "0.5.16", "0.5.19", "0.5.20", "0.5.23"]
RELEASES = ALL_RELEASES if all_releases_requested() else PLAN_CI
# Qwen3.6's class is registered from v0.5.9 (before: exit 2, test_bad_input.py)
BEFORE_QWEN3_5 = ("0.5.5", "0.5.6", "0.5.7", "0.5.8")

# healthy-h200-8b's figures (tools/sgl_overlay/harness/scenarios/healthy-h200-8b.toml)
H200_FREE = [139.5, 124.54]
# The incident's logged free memory (tests/plan/helpers.LOGGED_FREE)
PRO6000_FREE = [94.24, 43.19]


def _dense_expected():
    """By hand, not from the harness: the KV budget is post - pre x (1 - mfs) =
    124.54 - 139.5 x 0.089 = 112.1245 GiB; Llama-3.1-8B's cell is 32 layers x 8 KV
    heads x 128 x 2 (K, V) x 2 B = 131,072 B/token, so 112.1245 x 2^30 / 131,072 =
    918,523.9 -> 918,523 tokens; requests min(max(int(tokens / 131,072 x 512), 2048),
    4096) = int(3,587.98) = 3,587 (the pool-size rule of every release's
    resolve_max_num_reqs / ModelRunner).  docs/results/regress.md's reference table has the
    same 918,523 / 3,587."""
    pre, post, mfs, cell, ctx = 139.5, 124.54, 0.911, 131072, 131072
    tokens = int((post - pre * (1 - mfs)) * (1 << 30) / cell)
    return tokens, min(max(int(tokens / ctx * 512), 2048), 4096)


@pytest.mark.parametrize("release", RELEASES)
def test_dense_plan_on_every_release(release):
    dep = deployment(model=LLAMA8B, argv=["--mem-fraction-static", "0.911"], release=release, free_gib=H200_FREE)
    s = core.size(dep)
    assert s.verdict == core.STARTS, s.why
    assert (s.ledger["kv_tokens"], s.ledger["running_requests"]) == _dense_expected() == (918523, 3587)


@pytest.mark.parametrize("release", [r for r in RELEASES if r not in BEFORE_QWEN3_5])
def test_hybrid_plan_on_every_release_with_qwen3_5(release):
    """Qwen3.6-27B without speculative decoding: a verdict with figures on every release
    that registers the architecture (before v0.5.20's fix of the declared fallbacks, the
    sizing read mamba_full_memory_ratio = None: "cannot tell").  The per-token and
    per-slot sizes are derived by hand from the config: 16 full-attention layers x 4 KV
    heads x 256 x 2 x 2 B = 65,536 B/token; 48 linear-attention layers x (conv state
    3 x (2 x 16 x 128 + 48 x 128) x 2 B + temporal state 48 x 128 x 128 x 4 B) =
    153,944,064 B/slot."""
    dep = deployment(model=QWEN36, argv=["--context-length", "32768", "--max-running-requests", "4",
                                         "--mem-fraction-static", "0.6856901"],
                     release=release, free_gib=PRO6000_FREE)
    s = core.size(dep)
    assert s.verdict == core.STARTS, s.why
    cell = 16 * 4 * 256 * 2 * 2
    if release in ("0.5.9", "0.5.10.post1"):  # their sizing path reports no cell size:
        # the KV tokens are the KV budget (4-digit GiB in the ledger) over that cell
        assert abs(s.ledger["kv_tokens"] - s.ledger["kv_budget_gib"] * (1 << 30) / cell) < 2
    else:
        assert s.ledger["cell_size_bytes_per_token"] == cell == 65536
    assert s.ledger["mamba_state_per_slot_bytes"] == 48 * (3 * (2 * 16 * 128 + 48 * 128) * 2
                                                           + 48 * 128 * 128 * 4) == 153944064
    assert s.ledger["running_requests"] == 4 and s.ledger["kv_tokens"] >= 32768

