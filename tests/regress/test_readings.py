"""The readings model (sgl_overlay.harness.readings, pure) and the release facts it takes
(sgl_overlay.harness.child.release_window, read from real release trees): what the sizing can have read, given
a scenario's readings of either kind (docs/scenarios.md, "The readings")."""

import json
from pathlib import Path

import pytest

from sgl_overlay.harness import readings, source_root
from sgl_overlay.harness.child import release_window, rope_reserve
from sgl_overlay.harness.readings import End, InWindow, ReadingKind, Window, derive

GIB, MIB = 1 << 30, 1 << 20
PRE_GAP = Path(__file__).resolve().parents[1] / "data/gpu_results/2026-12-02/pre_gap_check.json"


def _window(pool=InWindow.YES, rope=(20 * MIB, 20 * MIB)):
    return Window(pool, "here", rope[0], rope[1], "rope")


def test_sizing_readings_are_used_as_given():
    """The default kind, what every scenario gave before the key: no term, one exact run."""
    r = derive(ReadingKind.SIZING, 93.63592529296875, 42.29412841796875, 0.0, 0.0)
    assert r.exact and r.terms == () and r.at(0.0) == r.at(1.0) == (93.63592529296875, 42.29412841796875)


def test_logged_readings_on_the_h200_are_exact_but_for_their_rounding():
    """H200: the measured pool (73,400,320 B) above "Load weight begin", the RoPE expansion below "Load weight
    end"; the only width is the two readings' rounding."""
    r = derive(ReadingKind.LOGGED, 93.57, 42.31, 0.005, 0.005, device_name="NVIDIA H200", window=_window())
    assert r.pre == pytest.approx((93.57 - 0.005 + 70 / 1024, 93.57 + 0.005 + 70 / 1024))
    assert r.post == pytest.approx((42.31 - 0.005 - 20 / 1024, 42.31 + 0.005 - 20 / 1024))
    assert [t.name for t in r.terms if not t.exact] == ["rounding", "rounding"]
    assert r.at(End.PESSIMISTIC.position) == (r.pre[1], r.post[0])   # the smallest budget
    assert r.at(End.OPTIMISTIC.position) == (r.pre[0], r.post[1])
    mid = r.at(0.5)
    assert mid == pytest.approx(((r.pre[0] + r.pre[1]) / 2, (r.post[0] + r.post[1]) / 2))
    with pytest.raises(ValueError):
        r.at(1.5)


def test_the_h200_pool_is_the_measurement():
    """The constant is tools/gpu/pre_gap_check.py's figure on the H200, both orders."""
    check = json.loads(PRE_GAP.read_text())
    assert check["device"] == "NVIDIA H200"
    for order in check["orders"].values():
        (stream,) = [d for d in order["deltas"] if d["step"] == "stream"]
        assert stream["outside_allocator"] == readings.H200_POOL_BYTES
    assert readings.stream_pool_cost("NVIDIA H200").measured


def test_an_unmeasured_gpu_gets_the_span_never_one_number():
    r = derive(ReadingKind.LOGGED, 78.48, 50.01, 0.01, 0.005, device_name="NVIDIA H100 80GB HBM3",
               window=_window(rope=(40 * MIB, 40 * MIB)))
    (pool,) = [t for t in r.terms if t.name == "stream pool"]
    assert (pool.lo, pool.hi) == (0, 2 * readings.H200_POOL_BYTES) and "not measured" in pool.source
    assert not r.exact and "stream pool" in r.width_words()


def test_where_the_pool_is_made_decides_its_term():
    """At TP > 1 PyNCCL made the pool before the pre reading (nothing); a tree that does not show where:
    from nothing to the pool's cost."""
    before = derive(ReadingKind.LOGGED, 22.84, 19.08, 0.01, 0.005, device_name="NVIDIA GeForce RTX 4090", tp=2,
                    window=_window(InWindow.NO))
    (pool,) = [t for t in before.terms if t.name == "stream pool"]
    assert (pool.lo, pool.hi) == (0, 0) and any("TP 2" in n for n in before.notes)
    unknown = derive(ReadingKind.LOGGED, 93.57, 42.31, 0.005, 0.005, device_name="NVIDIA H200",
                     window=_window(InWindow.UNKNOWN))
    (pool,) = [t for t in unknown.terms if t.name == "stream pool"]
    assert (pool.lo, pool.hi) == (0, readings.H200_POOL_BYTES)


def test_an_integrated_gpu_is_not_bounded():
    r = derive(ReadingKind.LOGGED, 111.73, 59.87, 0.01, 0.005, device_name="NVIDIA GB10", window=_window(),
               integrated=True)
    assert not r.bounded and any("host's available memory" in n for n in r.notes)


def test_logged_readings_need_the_window():
    with pytest.raises(ValueError, match="window"):
        derive(ReadingKind.LOGGED, 1.0, 0.5, 0.0, 0.0)


def test_the_json_form_round_trips():
    r = derive(ReadingKind.LOGGED, 78.48, 50.01, 0.01, 0.005, device_name="x", window=_window())
    back = readings.SizingReadings.from_json(json.loads(json.dumps(r.to_json())))
    assert back == r and back.width_words() == r.width_words()


@pytest.mark.parametrize("text, rounding", [("94.24", 0.005), ("94.2", 0.05), ("94", 0.5), ("138.682373046875",
                                                                                              0.5e-12), ("1e2", 0.0)])
def test_a_typed_value_is_within_half_its_last_digit(text, rounding):
    assert readings.rounding_of(text) == pytest.approx(rounding)


@pytest.mark.parametrize("version, runner_line, pynccl_line", [("0.5.9", 395, 116), ("0.5.12.post1", 514, 114),
                                                               ("0.5.17", 371, 126)])
def test_the_release_s_first_stream(release_tree, version, runner_line, pynccl_line):
    """Read from the release's own files: at one GPU the forward stream (ModelRunner.__init__, after
    init_torch_distributed) is the first; at TP > 1 PyNCCL's communicator, built by initialize_model_parallel
    before the pre reading (from v0.5.16 through bootstrap._init_parallel_groups), creates one first."""
    facts = release_window.read(source_root(release_tree(version)))
    assert (facts.forward_after_pre, facts.pynccl_before_pre) == (True, True)
    assert f"model_runner.py:{runner_line} Stream()" in facts.where and f"pynccl.py:{pynccl_line} Stream()" in facts.where
    assert release_window.stream_pool_in_window(facts, 1) is InWindow.YES
    assert release_window.stream_pool_in_window(facts, 2) is InWindow.NO


def _body(lines: str, indent: int) -> str:
    return "".join(" " * indent + line + "\n" for line in lines.splitlines())


def _tree(tmp_path, runner_init, pynccl_init=None):
    srt = tmp_path / "sglang" / "srt"
    (srt / "model_executor").mkdir(parents=True)
    (srt / "model_executor" / "model_runner.py").write_text(
        "class ModelRunner:\n    def __init__(self):\n" + _body(runner_init, 8)
        + "    def init_torch_distributed(self):\n        initialize_model_parallel()\n"
        "        pre_model_load_memory = get_available_gpu_memory()\n        return pre_model_load_memory\n")
    if pynccl_init is not None:
        (srt / "distributed" / "device_communicators").mkdir(parents=True)
        (srt / "distributed" / "device_communicators" / "pynccl.py").write_text(
            "class PyNcclCommunicator:\n    def __init__(self):\n" + _body(pynccl_init, 8))
    return tmp_path


def test_a_tree_that_does_not_show_it_is_unknown(tmp_path):
    """A stream made before init_torch_distributed: no pool in the window; no PyNCCL stream: TP > 1 unknown;
    no stream at all: unknown."""
    early = release_window.read(_tree(tmp_path / "a", "s = torch.cuda.Stream()\nself.init_torch_distributed()\n",
                                      "self.stream = torch.cuda.Stream()\n"))
    assert release_window.stream_pool_in_window(early, 1) is InWindow.NO
    assert release_window.stream_pool_in_window(early, 2) is InWindow.NO
    silent = release_window.read(_tree(tmp_path / "b", "self.init_torch_distributed()\ns = torch.cuda.Stream()\n",
                                       "self.comm = None\n"))
    assert release_window.stream_pool_in_window(silent, 1) is InWindow.YES
    assert release_window.stream_pool_in_window(silent, 2) is InWindow.UNKNOWN
    none = release_window.read(_tree(tmp_path / "c", "self.init_torch_distributed()\n"))
    assert release_window.stream_pool_in_window(none, 1) is InWindow.UNKNOWN


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.17"])   # the releases of the H200's 27B-shaped starts
def test_the_vision_tower_s_default_is_the_release_s(release_tree, version):
    """A Qwen3.5-family config.json without vision_config: the tree's own Qwen3VLVisionConfig defaults
    (hidden 1152, 16 heads), as the 27B-shaped H200 starts had (tests/plan/data/qwen3.6-27b; on
    v0.5.12.post1 on 2026-12-01, on the pin, v0.5.17, on 2026-12-03)."""
    rel = rope_reserve.release_rope(source_root(release_tree(version)))
    assert rel.vision_default == (1152, 16)
    model = {"kind": "qwen3_5", "context_len": 32768,
             "text_config": {"max_position_embeddings": 262144, "head_dim": 256}}
    assert rope_reserve.expansion(model, 32768, rel).lo == 20 * MIB   # the measured post-load gap


def test_an_unknown_rope_type_is_a_span_and_the_environment_is_read(pristine_tree):
    rel = rope_reserve.release_rope(source_root(pristine_tree))          # the pin
    model = {"kind": "dense", "max_position_embeddings": 32768, "head_dim": 128,
             "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    e = rope_reserve.expansion(model, 131072, rel)
    assert e.lo == 0 and e.hi == rope_reserve.segment_bytes(131328 * 128 * 4) and "yarn" in e.words
    assert rope_reserve.with_environment(rel, {"SGLANG_ROPE_CACHE_SAFETY_MARGIN": "1024"}).margin == 1024
    assert rope_reserve.with_environment(rel, {}) == rel
