"""The harness against start-up logs nobody here wrote (issue 14 part 3, issue 27): every
``public-*.toml`` scenario names its public source (``[source] url``), the release the log came
from (``[source] release``), gives the log's own "Load weight begin" / "Load weight end" readings
(``[gpu] readings = "logged"``, with their rounding) and the figures the log printed
(``[expect.logged]``, typed in from the source; the address is in the scenario's comments next to
each line used).

The harness derives the sizing's own readings from the log's (harness/readings.py: the release's
stream pool before "Load weight begin", its RoPE pre-expansion after "Load weight end", the
rounding) and runs the release's code at both ends of their span.  The tests:

* ``test_logged_figures``: ``status = "holds"``: every logged figure lies within the harness's
  range; ``"open"``: it does not (asserted, so neither status can be wrong), then an xfail with
  the scenario's reason.  Nothing of the row goes into its range: its width is the model's (the
  readings' rounding and the stream pool's span), none of it taken from the logged figures;
* ``test_one_reading_gives_every_logged_figure``: a witness, the sizing's post-load reading (the
  pre-load one as logged) at which the release's code gives every logged figure at once (found by
  bisection with the harness; ``[source] witness_post_load_free_gib``): the logged figures are
  consistent with each other and with the release's code;
* the measured facts the model rests on: the H200's stream pool (73,400,320 B) and the RoPE
  pre-expansion, against the probe's readings of seven starts (free_readings.json).
docs/results/regress.md has the table."""

import dataclasses
import json
from pathlib import Path

import pytest

from sgl_overlay.harness import Outcome, load_scenario, run_scenario, source_root
from sgl_overlay.harness import readings
from sgl_overlay.harness.child import rope_reserve
from sgl_overlay.harness.reading_gaps import GIB, ReadingsError, gaps_of_start, measured_gaps
from sgl_overlay.harness.scenario import SCENARIO_DIR, ScenarioError, load

PUBLIC = sorted(p.stem for p in SCENARIO_DIR.glob("public-*.toml"))
FREE_READINGS = Path(__file__).resolve().parents[1] / "data/gpu_results/2026-12-01/free_readings.json"


def _run(root, sc, post, pre=None):
    """The scenario with the sizing's own readings given (``readings = "sizing"``, exact): the post-load
    one ``post``, the pre-load one ``pre`` or the log's."""
    gpu = dict(sc.gpu, post_load_free_gib=post, readings="sizing", pre_rounding_gib=0, post_rounding_gib=0)
    if pre is not None:
        gpu["pre_load_free_gib"] = pre
    r = run_scenario(root, dataclasses.replace(sc, gpu=gpu), verify_remedy=False)
    assert r.outcome is Outcome.OK, r.reason
    return r.figures


# What each measured start ran (free_readings.json's "model"), for its RoPE pre-expansion on v0.5.12.post1:
# "hybrid" is tools/gpu/e2e_models.py's HYBRID (text max_position_embeddings 8192, head_dim 128, the
# Qwen3.5 default partial rotary factor; a one-block vision tower, hidden 64, 2 heads), served with
# --context-length 4096 (tools/gpu/e2e.py, LOSSLESS_COMMON); the 27B-shaped start is
# tests/plan/data/qwen3.6-27b (262,144 positions, head_dim 256; no vision_config, so SGLang's default tower:
# hidden 1152, 16 heads) with --context-length 32768 (tools/gpu/e2e.py, BIG).  Their drafters' few draft
# rows (a DFlash block of 16) move no cache across a row boundary that matters here: left out.
START_INPUTS = {
    "hybrid": ({"kind": "qwen3_5", "context_len": 8192,
                "text_config": {"max_position_embeddings": 8192, "head_dim": 128},
                "vision_config": {"hidden_size": 64, "num_heads": 2}}, {"context_length": 4096}),
    "qwen3.6-27b (dummy weights)": ({"kind": "qwen3_5", "context_len": 262144,
                                     "text_config": {"max_position_embeddings": 262144, "head_dim": 256},
                                     "vision_config": {"hidden_size": 1152, "num_heads": 16}},
                                    {"context_length": 32768}),
    # case rope-262k (tools/gpu/e2e.py): the same model without a drafter, at its own context
    "qwen3.6-27b (dummy weights), context 262144": (
        {"kind": "qwen3_5", "context_len": 262144,
         "text_config": {"max_position_embeddings": 262144, "head_dim": 256},
         "vision_config": {"hidden_size": 1152, "num_heads": 16}}, {"context_length": 262144}),
}
MEASURED_RELEASE = "0.5.12.post1"


@pytest.fixture(scope="module")
def starts():
    return json.loads(FREE_READINGS.read_text())["starts"]


@pytest.fixture(scope="module")
def start_ropes(starts, release_tree):
    rel = rope_reserve.release_rope(source_root(release_tree(MEASURED_RELEASE)))
    return [rope_reserve.scenario_expansion_bytes(*START_INPUTS[s["model"]], rel) for s in starts]


@pytest.fixture(scope="module")
def gaps(starts, start_ropes):
    return measured_gaps([s["readings"] for s in starts], start_ropes)


def _rope_gib(sc, root) -> float:
    return rope_reserve.scenario_expansion_bytes(sc.model, sc.server, rope_reserve.release_rope(root)) / GIB


@pytest.fixture(scope="module")
def runs(release_tree):
    """name -> (scenario, the harness's report on the log's own readings, figures at the witness, root)."""
    cache = {}

    def get(name):
        if name not in cache:
            sc = load_scenario(name)
            root = source_root(release_tree(sc.source["release"]))
            cache[name] = (sc, run_scenario(root, sc, verify_remedy=False),
                           _run(root, sc, sc.source["witness_post_load_free_gib"]), root)
        return cache[name]

    return get


def within(report, logged: dict) -> bool:
    """Every logged figure between the harness's figures at the two ends of the readings' span."""
    rng = report.range_json()
    span = rng["figures"] if rng else {k: [report.figures.get(k)] * 2 for k in logged}
    return all(k in span and span[k][0] <= v <= span[k][1] for k, v in logged.items())


def test_there_are_public_scenarios():
    assert PUBLIC, "no public-*.toml scenario"


@pytest.mark.parametrize("name", PUBLIC)
def test_one_reading_gives_every_logged_figure(runs, name):
    sc, _, witness, _ = runs(name)
    assert {k: witness[k] for k in sc.expect.logged} == sc.expect.logged


@pytest.mark.parametrize("name", PUBLIC)
def test_logged_figures(runs, name):
    """The harness's range from the log's own two lines holds every logged figure ("holds"), or
    it does not ("open", asserted, then an xfail with the reason)."""
    sc, report, _, _ = runs(name)
    assert sc.reading_kind is readings.ReadingKind.LOGGED
    assert report.outcome is Outcome.OK, report.reason
    assert report.optimistic is not None and report.optimistic.outcome is Outcome.OK, "logged readings span a range"
    logged = sc.expect.logged
    span = report.range_json()["figures"]
    seen = f"harness {({k: span[k] for k in logged})} (least, most), logged {logged}"
    if sc.source["status"] == "holds":
        assert within(report, logged), f"{name}: the logged figures lie outside the harness's range: {seen}"
        return
    assert not within(report, logged), f"{name}: the harness's range holds the logged figures ({seen}); status holds"
    pytest.xfail(f"{sc.source['reason']} ({seen})")


def test_an_integrated_gpu_is_not_bounded(runs):
    """GB10 (unified memory): the readings are the host's available memory, which the code's window does
    not bound; the report says so (``bounded`` false, a note), and the row stays open."""
    sc, report, _, _ = runs("public-gb10-qwen38-27b-v0515")
    assert sc.gpu["integrated"] is True and report.readings["bounded"] is False
    assert any("host's available memory" in n for n in report.readings["notes"])
    assert sc.source["status"] == "open"


def test_the_tp2_log_has_no_stream_pool_in_its_window(runs):
    """At TP 2 PyNCCL's communicator (initialize_model_parallel, before the pre reading) made the stream
    pool: the release's code puts nothing of it between the readings, so only the rounding widens the
    range (v0.5.9's pynccl.py and model_runner.py, read by harness/child/release_window.py)."""
    sc, report, _, _ = runs("public-4090x2-qwen35-397b-kt-v059")
    (pool,) = [t for t in report.readings["terms"] if t["name"] == "stream pool"]
    assert (pool["lo_bytes"], pool["hi_bytes"]) == (0, 0) and "before the pre reading" in pool["source"]
    assert any("TP 2" in n for n in report.readings["notes"])


@pytest.mark.parametrize("name", PUBLIC)
def test_the_range_s_width_is_the_model_s(runs, name):
    """The span of the sizing's readings is the log's readings moved by the release's terms: the rounding
    each scenario states (0.005 GiB, 0.01 for a sum of two), the stream pool (unmeasured on these GPUs:
    0 to 140 MiB; none at TP > 1) and the RoPE pre-expansion (exact): nothing taken from the logged figures."""
    sc, report, _, root = runs(name)
    r = report.readings
    pool = 0 if sc.gpu.get("world_size", 1) > 1 else readings.STREAM_POOL_UNMEASURED.hi
    pre_r, post_r = sc.gpu.get("pre_rounding_gib", 0.005), sc.gpu.get("post_rounding_gib", 0.005)
    rope = _rope_gib(sc, root)
    assert r["pre_gib"] == pytest.approx([sc.gpu["pre_load_free_gib"] - pre_r,
                                          sc.gpu["pre_load_free_gib"] + pre_r + pool / GIB], abs=1e-9)
    assert r["post_gib"] == pytest.approx([sc.gpu["post_load_free_gib"] - post_r - rope,
                                           sc.gpu["post_load_free_gib"] + post_r - rope], abs=1e-9)


def test_measured_gaps_are_the_probes_readings(gaps):
    """The gaps come from the H200 probe's readings (v0.5.12.post1, TP1, seven starts): the sizing's
    pre-load reading (init_torch_distributed) is 73,400,320 B (70 MiB) above "Load weight
    begin" in every start; the sizing's post-load reading is 0 B (small hybrid) to 20,971,520 B
    (27B-shaped hybrid at context 32,768) or 41,943,040 B (the same at its own 262,144) below "Load
    weight end", all of it the RoPE pre-expansion (next test), so nothing is left to carry to the logs."""
    assert (gaps.pre, gaps.post, gaps.starts) == ((70 << 20, 70 << 20), (0, 0), 7)
    # the readings model's measured pool is this measurement
    assert readings.STREAM_POOL_MEASURED["NVIDIA H200"].lo == readings.H200_POOL_BYTES == gaps.pre[0]


def test_rope_expansion_is_the_measured_post_gap(starts, start_ropes):
    """Each start's post-load gap, as measured ("Load weight end" minus the sizing's reading), is
    the memory reserve_rope_cache_for_long_sequences takes in between: none for the small hybrid
    (context 4096 + 256 stays below both caches' 8192 rows), and for the 27B-shaped start one fresh
    20 MiB allocator segment holding the vision tower's grown cache (33,024 rows x 36 x 4 B =
    4,755,456 B, under 10 MiB: a 20 MiB segment; the text cache's 262,144 rows need no growth).
    The seventh start (case rope-262k, run on the H200 after the prediction was written) is the
    27B-shaped model at its own 262,144-token context: both caches grow, 40 MiB predicted
    (test_the_log_s_own_rope_expansion_lowers_its_post_reading's arithmetic) and 41,943,040 B measured."""
    measured = [gaps_of_start(s["readings"])[1] for s in starts]
    assert measured == [0, 0, 0, 0, 20 << 20, 20 << 20, 40 << 20]
    assert start_ropes == measured


def test_the_log_s_own_rope_expansion_lowers_its_post_reading(runs):
    """v0.5.18 at the model's own context (262,144): reserve = 262,144 + 256 = 262,400 rows, so both
    caches grow to 262,400 rows.  Vision: 262,400 x 36 x 4 B = 37,785,600 B, a 38 MiB segment (the
    old 8,192-row cache shares a segment: nothing released).  Text (M)RoPE: 262,400 x 64 x 4 B =
    67,174,400 B, a 66 MiB segment, less the old 262,144-row cache's own 64 MiB segment.  Together
    40 MiB, between "Load weight end" and the sizing's reading: the sizing's post-load reading is the
    logged one less 40 MiB, give or take the rounding."""
    sc, report, _, root = runs("public-h100-qwen38-27b-fp8")
    assert _rope_gib(sc, root) * GIB == 40 << 20
    (rope,) = [t for t in report.readings["terms"] if t["name"] == "RoPE pre-expansion"]
    assert rope["lo_bytes"] == rope["hi_bytes"] == -(40 << 20)
    lo, hi = report.readings["post_gib"]
    assert (sc.gpu["post_load_free_gib"] - hi, sc.gpu["post_load_free_gib"] - lo) == pytest.approx(
        (40 / 1024 - 0.005, 40 / 1024 + 0.005))


def test_a_start_without_the_sizing_reading_is_refused():
    readings = [{"caller": "init_torch_distributed", "bytes": b, "draft": False} for b in (10, 9, 9)]
    readings += [{"caller": "load_model", "bytes": b, "draft": False} for b in (8, 8, 5)]
    assert gaps_of_start(readings + [{"caller": "free_memory_per_rank", "bytes": 4, "draft": False}]) == (1, 1)
    with pytest.raises(ReadingsError):
        gaps_of_start(readings)
    with pytest.raises(ReadingsError, match="differ"):
        gaps_of_start([dict(readings[1], bytes=7)] + readings + [{"caller": "free_memory_per_rank", "bytes": 4,
                                                                  "draft": False}])


def test_mamba_ratio_of_v0_5_18_is_the_logs(runs):
    """v0.5.18 printed "max_running_requests is capped to 24" with 124 Mamba slots: the
    only slots-per-request ratio r with 124 // r == 24 is 5 (the extra_buffer strategy
    with the overlap scheduler).  The harness must apply the same ratio to its own slot
    count.  (It gave 32 requests, i.e. ratio 3, while runtime_context's
    mamba_extra_buffer_enabled() was an inert stand-in.)"""
    sc, report, _, _ = runs("public-h100-qwen38-27b-fp8")
    nominal = report.figures
    slots, reqs = sc.expect.logged["max_mamba_cache_size"], sc.expect.logged["max_running_requests"]
    (ratio,) = [r for r in range(1, 12) if slots // r == reqs]
    assert nominal["max_running_requests"] == nominal["max_mamba_cache_size"] // ratio


@pytest.mark.parametrize("name", ["public-b200-qwen3-8b-main0427", "public-gb300-qwen3-8b-main0524"])
def test_default_attention_backend_of_the_b200_log(runs, name):
    """The B200 and GB300 logs (every flag at its default) say "Use trtllm_mha backend by default"
    and "changing page_size from None to 64": the release's own rules must say the same.  (The
    harness chose flashinfer and page size 1 while utils.common.is_no_spec_infer_or_topk_one
    was an inert stand-in.)"""
    _, report, _, _ = runs(name)
    nominal = report.figures
    resolved = {c["flag"]: c["resolved"] for c in nominal["resolution"]}
    assert (resolved["attention_backend"], resolved["page_size"]) == ("trtllm_mha", 64)
    assert nominal["max_total_num_tokens"] % 64 == 0


@pytest.mark.parametrize("name, logged_mfs", [("public-h100-qwen3-30b-a3b-fp8-v0518", 0.83),
                                               ("public-h100-qwen3-30b-a3b-fp8-kt-v0518", 0.841)])
def test_default_mem_fraction_static_of_the_h100_logs(runs, name, logged_mfs):
    """The two H100 runs of one source leave --mem-fraction-static unset; their server_args lines print
    0.83 (CUDA graphs on) and 0.841 (--disable-cuda-graph).  The release's own resolution must give the
    same, from the scenario's flags alone."""
    sc, report, _, _ = runs(name)
    nominal = report.figures
    assert "mem_fraction_static" not in sc.server
    resolved = {c["flag"]: c["resolved"] for c in nominal["resolution"]}
    assert float(resolved["mem_fraction_static"]) == logged_mfs


def _write(tmp_path, body, gpu='readings = "logged"\n', model='max_position_embeddings = 4096\nhead_dim = 128\n'):
    p = tmp_path / "x.toml"
    p.write_text('[gpu]\npre_load_free_gib = 1.0\npost_load_free_gib = 0.5\n' + gpu + '[model]\n' + model
                 + '[server]\n[expect]\npass = ["ok"]\n' + body)
    return p


def test_source_table_is_checked(tmp_path):
    good = ('[expect.logged]\nmax_total_num_tokens = 10\n[source]\nurl = "https://example.org/x"\n'
            'release = "0.5.18"\nstatus = "holds"\nwitness_post_load_free_gib = 0.5\n')
    sc = load(str(_write(tmp_path, good)))
    assert sc.source["release"] == "0.5.18" and sc.expect.logged == {"max_total_num_tokens": 10}
    assert sc.reading_kind is readings.ReadingKind.LOGGED
    bad = {
        "no url": good.replace('url = "https://example.org/x"\n', ""),
        "not https": good.replace("https://", "http://"),
        "unknown status": good.replace('"holds"', '"close"'),
        "open without reason": good.replace('"holds"', '"open"'),
        "unknown figure": good.replace("max_total_num_tokens", "tokens"),
        "logged without source": '[expect.logged]\nmax_total_num_tokens = 10\n',
        "no witness": good.replace("witness_post_load_free_gib = 0.5\n", ""),
        "rounding left in [source]": good + "pre_rounding_gib = 0.01\n",
    }
    for why, body in bad.items():
        with pytest.raises(ScenarioError):
            load(str(_write(tmp_path, body)))
            pytest.fail(why)
    with pytest.raises(ScenarioError, match='readings = "logged"'):
        load(str(_write(tmp_path, good, gpu="")))   # a log's readings must say so


def test_gpu_readings_are_checked(tmp_path):
    """[gpu] readings is a kind (default sizing, what scenarios were before the key); the rounding is a
    non-negative number; logged readings need what the RoPE pre-expansion reads."""
    assert load(str(_write(tmp_path, "", gpu=""))).reading_kind is readings.ReadingKind.SIZING
    for gpu, model, match in (('readings = "printed"\n', "", "readings"),
                              ('readings = "logged"\npre_rounding_gib = -0.01\n', None, "negative"),
                              ('post_rounding_gib = "0.005"\n', None, "number"),
                              ('integrated = 1\n', None, "integrated"),
                              ('readings = "logged"\n', "head_dim = 128\n", "max_position_embeddings")):
        with pytest.raises(ScenarioError, match=match):
            load(str(_write(tmp_path, "", gpu=gpu, **({} if model is None else {"model": model}))))
