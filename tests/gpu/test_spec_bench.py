"""The speculative-value benchmark's figures (tools/gpu/spec_bench.py): configurations and their
flags, one measurement's figures from SGLang's meta_info, medians over rounds, ratios to AR and
DFLASH, and the projection's arithmetic; every expectation worked out by hand from the inputs."""
import pytest

from tests.gpu.spec_script import bench


def test_configs_and_flags():
    names = [c.name for c in bench.configs()]
    assert names == ["AR", "DFLASH", "DDTREE-8", "DDTREE-16", "DDTREE-32", "DDTREE-63"]
    ar, df, dd = bench.parse_configs("AR,DFLASH,DDTREE-24")
    assert bench.spec_flags(ar, "D") == ["--disable-overlap-schedule"]
    assert bench.spec_flags(df, "D") == ["--disable-overlap-schedule", "--speculative-algorithm", "DFLASH",
                                         "--speculative-draft-model-path", "D"]
    assert bench.spec_flags(dd, "D")[-2:] == ["--speculative-ddtree-budget", "24"]
    with pytest.raises(ValueError, match="unknown configuration 'EAGLE'"):
        bench.parse_configs("AR,EAGLE")


def test_overlap_configurations():
    """A name alone: the overlap scheduler off; with /overlap: on (SGLang's default, no flag)."""
    ar, dd = bench.parse_configs("AR/overlap,DDTREE-16/overlap")
    assert (ar.name, ar.algorithm, ar.overlap) == ("AR/overlap", None, True) and dd.budget == 16 and dd.overlap
    assert bench.spec_flags(ar, "D") == []
    assert bench.spec_flags(dd, "D") == ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "D",
                                         "--speculative-ddtree-budget", "16"]
    assert [c.name for c in bench.configs(budgets=(16,), overlap=True)] == ["AR/overlap", "DFLASH/overlap",
                                                                            "DDTREE-16/overlap"]
    assert bench.split_name("DDTREE-16/overlap") == ("DDTREE-16", True) and bench.split_name("AR") == ("AR", False)
    with pytest.raises(ValueError, match="unknown configuration 'DFLASH/sync'"):
        bench.parse_configs("DFLASH/sync")



def test_eager_tree_configurations():
    """DDTREE-<budget>-eager: the same server flags as DDTREE-<budget>, with DFlash's switch that keeps
    the draft head out of the draft CUDA graph in its environment; set against the DFLASH and AR of
    its scheduling, listed after the in-graph DDTREE of its budget."""
    dd, eager, eager_ov = bench.parse_configs("DDTREE-16,DDTREE-16-eager,DDTREE-16-eager/overlap")
    assert (eager.algorithm, eager.budget, eager.eager_tree, eager.overlap) == ("DDTREE", 16, True, False)
    assert eager_ov.overlap and eager_ov.eager_tree and bench.split_name(eager_ov.name) == ("DDTREE-16-eager", True)
    assert bench.spec_flags(eager, "D") == bench.spec_flags(dd, "D")
    assert eager.env == {"SGLANG_DFLASH_EAGER_DRAFT_SAMPLER": "1"} and dd.env == {}
    rows = [{"config": c, "batch": 1, "tokens_per_s": t, "step_ms": s}
            for c, t, s in [("DFLASH/overlap", 100.0, 12.0), ("DDTREE-16-eager/overlap", 95.0, 12.4),
                            ("DDTREE-16/overlap", 98.0, 12.1), ("AR/overlap", 125.0, 8.0)]]
    m = {r["config"]: r for r in bench.ratios(rows)}
    assert m["DDTREE-16-eager/overlap"]["vs_dflash"] == 0.95 and m["DDTREE-16-eager/overlap"]["step_over_dflash_ms"] == 0.4
    assert m["DDTREE-16-eager/overlap"]["step_vs_ar"] == 1.55
    md = bench.table(list(m.values()), "t")
    assert md.index("| AR/overlap |") < md.index("| DFLASH/overlap |") < md.index("| DDTREE-16/overlap |") \
        < md.index("| DDTREE-16-eager/overlap |")
    with pytest.raises(ValueError, match="unknown configuration 'DFLASH-eager'"):
        bench.parse_configs("DFLASH-eager")

def test_chain_configurations():
    """DDTREE-<budget>-chain<K>: DDTREE's flags plus --speculative-ddtree-chain-batch K; with -eager
    and /overlap in that order; set against the DFLASH of its scheduling like any DDTREE."""
    ch, both = bench.parse_configs("DDTREE-63-chain16,DDTREE-32-eager-chain4/overlap")
    assert (ch.algorithm, ch.budget, ch.chain_batch, ch.eager_tree, ch.overlap) == ("DDTREE", 63, 16, False, False)
    assert bench.spec_flags(ch, "D") == ["--disable-overlap-schedule", "--speculative-algorithm", "DDTREE",
                                         "--speculative-draft-model-path", "D", "--speculative-ddtree-budget", "63",
                                         "--speculative-ddtree-chain-batch", "16"]
    assert (both.budget, both.chain_batch, both.eager_tree, both.overlap) == (32, 4, True, True)
    assert both.env == {"SGLANG_DFLASH_EAGER_DRAFT_SAMPLER": "1"}
    assert bench.split_name(both.name) == ("DDTREE-32-eager-chain4", True)
    assert bench.parse_configs("DDTREE-16")[0].chain_batch is None
    for bad in ("DDTREE-16-chain0", "DDTREE-16-chain", "DDTREE-chain4", "DFLASH-chain4", "DDTREE-16-chain4-eager",
                "DDTREE-016", "AR-chain2"):
        with pytest.raises(ValueError, match=f"unknown configuration '{bad}'"):
            bench.parse_configs(bad)
    rows = [{"config": c, "batch": 16, "tokens_per_s": t, "step_ms": s}
            for c, t, s in [("DFLASH/overlap", 100.0, 12.0), ("DDTREE-63-chain16/overlap", 99.0, 12.1)]]
    m = {r["config"]: r for r in bench.ratios(rows)}
    assert m["DDTREE-63-chain16/overlap"]["vs_dflash"] == 0.99


def test_adaptive_configurations():
    """DDTREE-<budget>-adaptive: DDTREE's flags plus --speculative-ddtree-adaptive; not with a chain
    batch (the server refuses both), and no chain batch is derived for it."""
    ad, ad_eager = bench.parse_configs("DDTREE-63-adaptive/overlap,DDTREE-16-eager-adaptive")
    assert (ad.budget, ad.adaptive, ad.chain_batch, ad.overlap) == (63, True, None, True)
    assert bench.spec_flags(ad, "D") == ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "D",
                                         "--speculative-ddtree-budget", "63", "--speculative-ddtree-adaptive"]
    assert (ad_eager.eager_tree, ad_eager.adaptive, ad_eager.overlap) == (True, True, False)
    assert not bench.parse_configs("DDTREE-63")[0].adaptive
    for bad in ("DDTREE-16-chain4-adaptive", "DDTREE-16-adaptive-chain4", "DFLASH-adaptive", "DDTREE-adaptive"):
        with pytest.raises(ValueError, match=f"unknown configuration '{bad}'"):
            bench.parse_configs(bad)
    rows = [{"config": "DDTREE-63-adaptive/overlap", "batch": 1, "tokens_per_s": 1.0},
            {"config": "DFLASH/overlap", "batch": 1, "tokens_per_s": 1.0}]
    with pytest.raises(ValueError, match="not a DDTREE configuration without a chain batch"):
        bench.chain_batch(rows, "DDTREE-63-adaptive/overlap")


def test_ratios_and_projection_within_one_scheduling():
    """DDTREE/overlap is set against DFLASH/overlap and AR/overlap, never against the synchronous runs."""
    rows = [{"config": c, "batch": 1, "tokens_per_s": t, "step_ms": s}
            for c, t, s in [("AR", 100.0, 10.0), ("DFLASH", 80.0, 15.0), ("DDTREE-16", 90.0, 16.0),
                            ("AR/overlap", 125.0, 8.0), ("DFLASH/overlap", 100.0, 12.0),
                            ("DDTREE-16/overlap", 120.0, 12.5)]]
    m = {r["config"]: r for r in bench.ratios(rows)}
    assert m["DDTREE-16/overlap"]["vs_dflash"] == 1.2 and m["DDTREE-16/overlap"]["step_over_dflash_ms"] == 0.5
    assert m["DDTREE-16/overlap"]["speedup_vs_ar"] == 0.96 and m["DFLASH/overlap"]["step_vs_ar"] == 1.5
    assert m["DDTREE-16"]["vs_dflash"] == 1.125 and m["DDTREE-16"]["step_over_dflash_ms"] == 1.0
    p = {r["config"]: r for r in bench.projection(rows, ({"source": "s", "DFLASH": 6.0, "DDTREE": 8.0},))}
    assert p["DFLASH/overlap"]["projected_speedup"] == 4.0 and p["DDTREE-16/overlap"]["projected_speedup"] == 5.12
    assert p["DFLASH"]["projected_speedup"] == 4.0 and p["DDTREE-16"]["projected_speedup"] == 5.0
    md = bench.table(list(m.values()), "t")
    assert md.index("| 1 | DDTREE-16 |") < md.index("| 1 | AR/overlap |") < md.index("| 1 | DDTREE-16/overlap |")


def meta(n, verify, decode_s, lat, ttft_s=0.01, t0=1_780_000_000.0):
    """A response's meta_info as v0.5.17 fills it with --enable-metrics: the tokenizer's
    request_received_ts / request_finished_ts, the scheduler's prefill_finished_time (realtime s)."""
    m = {"completion_tokens": n, "spec_verify_ct": verify, "e2e_latency": lat}
    if decode_s is not None:
        m.update(request_received_ts=t0, prefill_finished_time=t0 + ttft_s,
                 request_finished_ts=t0 + ttft_s + decode_s)
    return m


def test_one_measurement():
    dd = bench.parse_configs("DDTREE-16")[0]
    # request 1: 101 tokens in 40 verify steps, 0.2 s from its prefill's end to its finish -> 5 ms a step
    # request 2: 51 tokens, 20 steps, 0.08 s -> 4 ms a step; one too short to count
    run = {"wall_s": 0.5, "errors": [], "requests": [meta(101, 40, 0.2, 0.25, ttft_s=0.03),
                                                      meta(51, 20, 0.08, 0.1, ttft_s=0.02), meta(1, 1, None, 0.01)]}
    r = bench.summarise(dd, 4, run)
    assert r["completion_tokens"] == 153 and r["tokens_per_s"] == 306.0
    assert r["accept_length"] == round(153 / 61, 4) and r["verify_steps"] == 61
    assert r["step_ms"] == 4.5 and r["step_ms_requests"] == 2          # median of 5 and 4
    assert r["ttft_ms"] == 25.0                                         # median of 30 and 20
    ar = bench.parse_configs("AR")[0]
    # AR: 101 tokens = 100 decode steps in 0.2 s -> 2 ms
    r = bench.summarise(ar, 1, {"wall_s": 0.25, "errors": [], "requests": [meta(101, 0, 0.2, 0.25)]})
    assert r["accept_length"] == 1.0 and r["step_ms"] == 2.0 and r["tokens_per_s"] == 404.0
    # without --enable-metrics there are no timestamps: no step figure, said so
    assert bench.step_ms(meta(101, 40, None, 0.3), True) == (
        None, "no prefill_finished_time / request_finished_ts (server without --enable-metrics)")


def test_the_step_is_not_meta_infos_decode_throughput():
    """decode_throughput's window starts at the first output the tokenizer gets (token 50 of a
    non-streaming request, or its finish): a request that finished 0.3 s after its prefill in 100
    steps took 3 ms a step whatever decode_throughput says."""
    req = {**meta(151, 100, 0.3, 0.32), "decode_throughput": 150 / 0.1}
    step, source = bench.step_ms(req, True)
    assert step == pytest.approx(3.0, abs=1e-4) and source == "prefill_finished_time to request_finished_ts"


def test_the_timestamps_are_the_pins_meta_info(pristine_tree):
    """The keys step_ms reads are the ones the pin's tokenizer manager and scheduler write, and the
    pin holds a non-streaming request's output to multiples of 50 tokens."""
    obs = (pristine_tree / "sglang/srt/observability/req_time_stats.py").read_text()
    for key in ("request_received_ts", "request_finished_ts", "prefill_finished_time"):
        assert f'"{key}"' in obs, key
    assert "SGLANG_FORCE_STREAM_INTERVAL = EnvInt(50)" in (pristine_tree / "sglang/srt/environ.py").read_text()


def test_medians_and_ratios():
    rows = [{"config": c, "batch": 1, "requests": 64, "errors": [], "tokens_per_s": t, "step_ms": s,
             "accept_length": a, "per_request_tokens_per_s": None}
            for c, t, s, a in [("AR", 500.0, 2.0, 1.0), ("AR", 520.0, 2.2, 1.0), ("AR", 480.0, 2.1, 1.0),
                               ("DFLASH", 600.0, 4.0, 2.5), ("DFLASH", 640.0, 4.4, 2.5),
                               ("DDTREE-16", 660.0, 4.6, 3.0)]]
    m = {r["config"]: r for r in bench.ratios(bench.medians(rows))}
    assert m["AR"]["tokens_per_s"] == 500.0 and m["AR"]["step_ms"] == 2.1 and m["AR"]["rounds"] == 3
    assert m["DFLASH"]["tokens_per_s"] == 620.0 and m["DFLASH"]["step_ms"] == 4.2
    assert m["DFLASH"]["speedup_vs_ar"] == 1.24 and m["DFLASH"]["step_vs_ar"] == 2.0 and m["DFLASH"]["vs_dflash"] is None
    assert m["DDTREE-16"]["vs_dflash"] == round(660 / 620, 4) and m["DDTREE-16"]["step_over_dflash_ms"] == 0.4
    md = bench.table(list(m.values()), "t")
    assert md.index("| 1 | AR |") < md.index("| 1 | DFLASH |") < md.index("| 1 | DDTREE-16 |")


def test_projection_arithmetic():
    steps = [{"config": "AR", "batch": 1, "step_ms": 18.0}, {"config": "DFLASH", "batch": 1, "step_ms": 27.0},
             {"config": "DDTREE-16", "batch": 1, "step_ms": 30.0}, {"config": "AR", "batch": 4, "step_ms": 20.0}]
    pub = ({"source": "s", "DFLASH": 6.0, "DDTREE": 8.0},)
    p = {r["config"]: r for r in bench.projection(steps, pub)}
    # speed-up = tau x AR step / speculative step; break-even tau = the step ratio
    assert p["DFLASH"]["projected_speedup"] == 4.0 and p["DFLASH"]["break_even_accept_length"] == 1.5
    assert p["DDTREE-16"]["projected_speedup"] == 4.8 and p["DDTREE-16"]["step_ratio"] == round(30 / 18, 4)
    assert bench.projection([r for r in steps if r["config"] != "AR"], pub) == []
    assert "(projection)" in bench.projection_table(list(p.values()))


def test_ratio_projection_applies_the_pairs_tree_over_chain_ratio():
    from tests.gpu.spec_script import bench as b
    pair_rows = [{"config": "DFLASH/overlap", "batch": 1, "accept_length": 1.6},
                 {"config": "DDTREE-63/overlap", "batch": 1, "accept_length": 2.0}]      # ratio 1.25
    big = [{"config": "AR/overlap", "batch": 1, "step_ms": 10.0}, {"config": "DFLASH/overlap", "batch": 1, "step_ms": 12.0},
           {"config": "DDTREE-63/overlap", "batch": 1, "step_ms": 15.0}]
    res = b.ratio_projection(pair_rows, big, "DDTREE-63/overlap", published=(("s", 8.0),))
    r = res["rows"][0]
    # DFLASH: 8 x 10 / 12; the tree: 8 x 1.25 x 10 / 15 (the same here)
    assert res["ratio"] == 1.25 and r["tree_accept_length"] == 10.0
    assert r["dflash_speedup"] == round(80 / 12, 3) and r["tree_speedup"] == round(100 / 15, 3) and r["tree_over_dflash"] == 1.0
    # AR from another run of the large target, joined through each run's DFLASH step
    no_ar = [{"config": "DFLASH/overlap", "batch": 1, "step_ms": 24.0}, {"config": "DDTREE-63/overlap", "batch": 1, "step_ms": 30.0}]
    res2 = b.ratio_projection(pair_rows, no_ar, "DDTREE-63/overlap", big_ar_rows=big, published=(("s", 8.0),))
    assert res2["ar_step_ms"] == 20.0 and res2["rows"][0]["tree_speedup"] == round(8 * 1.25 * 20 / 30, 3)
    with pytest.raises(ValueError, match="no AR/overlap step"):
        b.ratio_projection(pair_rows, no_ar, "DDTREE-63/overlap", published=(("s", 8.0),))
    with pytest.raises(ValueError, match="DDTREE-15/overlap and DFLASH/overlap at batch 1"):
        b.ratio_projection(pair_rows, big, "DDTREE-15/overlap")
