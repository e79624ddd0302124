"""The incident (Qwen3.6-27B + z-lab DFlash drafter, one RTX PRO 6000, TP1) planned
with the logged free-memory figures, on the real release trees: v0.5.12.post1, the
release the incident ran on (its log gave the figures; a release-matrix test, docs/testing.md)."""

import pytest

from sgl_overlay.planner import core, deployment, plan
from sgl_overlay.planner.render import text

from .helpers import (DFLASH, LOGGED_FREE, LOGGED_SLOTS, LOGGED_TOKENS, INCIDENT, QWEN36, SMOKE_FLAGS, ZERO_FLAGS,
                      cli_json, recheck, recheck_all)


def kw(flags, release=INCIDENT, **extra):
    return dict(model=QWEN36, draft=DFLASH, argv=flags, release=release, free_gib=LOGGED_FREE, **extra)


def test_smoke_flags_plan_to_the_logged_figures_on_v0_5_12_post1():
    """The known-good smoke service's flags give the logged 11,893 KV tokens and the
    logged Mamba line's 24 slots (and 4 requests: 11.25 GiB = (4 + 1) x 16 draft tokens)."""
    args = kw(SMOKE_FLAGS)
    report = plan(deployment(**args), with_sensitivity=False, knobs=("context-length",))
    led = report["ledger"]
    assert (led["kv_tokens"], led["mamba_slots"], led["running_requests"]) == (LOGGED_TOKENS, LOGGED_SLOTS, 4)
    assert led["cell_size_bytes_per_token"] == 86016  # bf16 target cell scaled by (16 + 5) / 16 layers
    assert led["mamba_state_per_slot_bytes"] == 153944064
    assert led["speculative_num_draft_tokens"] == 16  # from the drafter's config.json block_size
    assert report["environment"] == {}  # no SGLANG_* here (tests/conftest.py), none printed
    assert "environment:" not in text(report)
    # It starts (v0.5.12.post1 writes no ledger: no over-budget answer), but the pool is shorter
    # than the 32,768-token context: a shortfall, said in words, not a verdict of its own.
    assert report["verdict"] == core.STARTS and report["case"] is None
    assert "shorter than the context length 32,768" in report["why"][0]
    assert report["shortfall"] == report["why"]
    assert led["max_request_tokens"] == LOGGED_TOKENS - 1
    # The smallest context length that makes it start outright, verified by the test too.
    (sug,) = report["suggestions"]
    (change,) = sug["changes"]
    assert change["flag"] == "--context-length" and sug["verdict"] == core.STARTS and sug["shortfall"] == []
    assert change["value"] <= LOGGED_TOKENS and change["was"] == 32768
    assert recheck_all(args, report) == 1
    # smallest change: 1,024 tokens more of context does not start outright (a run)
    more = core.size(deployment(**kw(SMOKE_FLAGS + ["--context-length", str(change["value"] + 1024)])))
    assert more.verdict == core.STARTS and more.shortfall


def test_zero_request_flags_will_not_start_on_v0_5_12_post1_with_verified_suggestions():
    args = kw(ZERO_FLAGS)
    report = plan(deployment(**args), with_sensitivity=False,
                  knobs=("mem-fraction-static", "max-running-requests", "kv-cache-dtype"))
    led = report["ledger"]
    assert report["verdict"] == core.WONT
    assert (led["kv_tokens"], led["mamba_slots"], led["running_requests"]) == (LOGGED_TOKENS, 2, 0)
    assert "0 running requests" in report["why"][0]
    # each a single flag: a search stops at the smallest sets that start
    flags = {c["flag"]: c["value"] for s in report["suggestions"] for c in s["changes"]}
    assert all(len(s["changes"]) == 1 for s in report["suggestions"])
    # fp8 KV is already set, so only the other two knobs are searched; both fix it
    assert set(flags) == {"--mem-fraction-static", "--max-running-requests"}
    assert 0.647166 < flags["--mem-fraction-static"] <= 0.95
    assert 1 <= flags["--max-running-requests"] < 4
    assert recheck_all(args, report) == 2
    # "Smallest": one grid step (0.001) less does not start (a further run, not a formula).
    m = flags["--mem-fraction-static"]
    below = core.size(deployment(**kw(ZERO_FLAGS + ["--mem-fraction-static", str(round(m - 0.001, 3))])))
    assert below.rank < core.FULL
    r = flags["--max-running-requests"]
    above = core.size(deployment(**kw(ZERO_FLAGS + ["--max-running-requests", str(r + 1)])))
    assert above.rank < core.FULL


def test_compare_releases_v0_5_12_post1_will_not_start_0_5_13_starts():
    """--releases: the same deployment on v0.5.9 (no DFLASH yet), v0.5.12.post1 and v0.5.13
    (whose sizing rework, dea85c30f4, gives the request the Mamba slots it needs)."""
    code, out, err = cli_json(QWEN36, "--draft", DFLASH, "--free-gib", "94.24,43.19",
                              "--releases", f"0.5.9,{INCIDENT},0.5.13", "--", *ZERO_FLAGS)
    assert code == 2, err  # one release rejects the flags: bad input for that release
    old, incident, new = out["releases"]
    assert old["verdict"] == "rejected" and "invalid choice: 'DFLASH'" in old["why"][0]
    assert (incident["tree"]["release"], new["tree"]["release"]) == (INCIDENT, "0.5.13")
    assert incident["verdict"] == core.WONT.text == "will not start" and incident["ledger"]["running_requests"] == 0
    # v0.5.13 starts: 1 running request, a shortfall of 1 of the 4 asked (said in words).
    assert new["outcome"] == "ok"
    assert (new["ledger"]["kv_tokens"], new["ledger"]["mamba_slots"], new["ledger"]["running_requests"]) == \
        (169388, 6, 1)
    assert new["verdict"] == core.STARTS.text == "starts" and "fewer than the 4 asked" in new["shortfall"][0]


@pytest.mark.parametrize("release", [INCIDENT, "0.5.13"])
def test_the_releases_own_dflash_rules_set_the_draft_tokens(release):
    """No --speculative-dflash-block-size: the release's own rule reads block_size from the
    drafter's config.json (16), through get_config(--speculative-draft-model-path)."""
    s = core.size(deployment(**kw(SMOKE_FLAGS, release=release)))
    assert s.figures["speculative_num_draft_tokens"] == 16
    assert s.ledger["kv_tokens"] == LOGGED_TOKENS
