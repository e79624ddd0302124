"""No logged figures: free memory from the GPU table, weights from the index file.
The plan states its assumptions and its sensitivity; how far it lands from the
logged figures is measured here (and reported in docs/results/plan.md)."""

from sgl_overlay.planner import core, deployment, gpus, plan

from .helpers import DFLASH, LOGGED_FREE, LOGGED_TOKENS, INCIDENT, QWEN36, SMOKE_FLAGS, cli


def test_estimate_states_assumptions_and_sensitivity_and_lands_where_the_inputs_say():
    est_dep = deployment(model=QWEN36, draft=DFLASH, argv=SMOKE_FLAGS, release=INCIDENT, gpu="RTX PRO 6000 Blackwell")
    est = plan(est_dep, with_suggestions=False)
    logged = core.size(deployment(model=QWEN36, draft=DFLASH, argv=SMOKE_FLAGS, release=INCIDENT, free_gib=LOGGED_FREE))
    assert logged.ledger["kv_tokens"] == LOGGED_TOKENS
    text = " ".join(est["assumptions"])
    assert "97,887 MiB" in text and "assumed start-up overhead" in text
    assert "metadata.total_size = 55,560,000,000 B" in text
    m = est_dep.memory
    assert m.source == "estimated"
    assert abs(m.pre_free_gib - (97887 / 1024 - gpus.DEFAULT_STARTUP_OVERHEAD_GIB)) < 1e-9
    # The estimate's inputs vs the log: more free memory before the load (+0.35 GiB),
    # more weights (+0.69 GiB: the index counts every tensor of the checkpoint, the log
    # what this process loaded), so less free after the load (-0.34 GiB).
    d_pre, d_post = m.pre_free_gib - LOGGED_FREE[0], m.post_free_gib - LOGGED_FREE[1]
    assert 0.3 < d_pre < 0.4 and -0.4 < d_post < -0.3
    # Sensitivity: each figure a re-run with free memory (or weights) moved by 0.1 GiB.
    sens = est["sensitivity"]
    up, down = sens["free_memory_plus"]["delta_tokens"], sens["free_memory_minus"]["delta_tokens"]
    w_up = sens["weights_plus"]["delta_tokens"]
    assert up > 0 > down and w_up < 0
    # 0.1 GiB of free-memory error (before and after the load alike) moves the KV budget
    # by 0.1 x mem_fraction_static GiB, ~856 bf16 DFlash tokens; 0.1 GiB of weights error
    # moves it by the whole 0.1 GiB, ~1,248 tokens.  The budget itself is 13.57 - 12.62 GiB,
    # a small difference of large numbers, so these dominate any formula's error.
    assert 800 < up < 900 and 1200 < -w_up < 1300
    # Where the estimate lands: the post-load error dominates; the sign follows the inputs.
    est_tokens = est["ledger"]["kv_tokens"]
    assert est_tokens < LOGGED_TOKENS
    assert est["ledger"]["mamba_slots"] == 24  # the explicit flag, unchanged


def test_cli_prints_assumptions_and_sensitivity():
    code, out, err = cli(QWEN36, "--draft", DFLASH, "--gpu", "rtx pro 6000", "--release", INCIDENT, "--no-suggest",
                         "-q", "--", *SMOKE_FLAGS)
    assert code in (0, 1), err
    assert "assumptions:" in out and "assumed start-up overhead" in out
    assert "sensitivity (each a re-run; 0.1 GiB steps)" in out
    assert "VERDICT:" in out and "KV tokens" in out
