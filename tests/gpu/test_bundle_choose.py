"""The bundle's decision (sgl_overlay.bundle.choose): candidates + sizes + budget + configuration
-> what goes in, what is left out, and what that disables."""
from sgl_overlay.bundle import MIB, Candidate, Variant, choose

KERNEL = Candidate("sglang-kernel", (Variant("full", 307 * MIB),
                                     Variant("slim", 16 * MIB, "FA3", requires=(("attention-backend", "triton"),))))
FI = Candidate("flashinfer-python", (Variant("full", 13 * MIB),))
TINY = Candidate("orjson", (Variant("full", MIB // 8),))


def test_slim_kernel_chosen_under_budget_with_triton():
    d = choose([KERNEL, FI, TINY], 60 * MIB, {"attention-backend": "triton"})
    assert d["fits"]
    assert [(c["name"], c["variant"]) for c in d["chosen"]] == [("sglang-kernel", "slim"), ("flashinfer-python", "full"), ("orjson", "full")]
    (left,) = d["left_out"]
    assert left["name"] == "sglang-kernel (full)" and "307.0 MiB" in left["reason"] and left["disables"] == "FA3"


def test_slim_kernel_refused_for_another_backend():
    d = choose([KERNEL, FI], 60 * MIB, {"attention-backend": "fa3"})
    assert not d["fits"]
    (left,) = d["left_out"]
    assert left["name"] == "sglang-kernel" and left["required"]
    assert "slim needs --attention-backend triton" in left["reason"]


def test_full_kernel_when_the_budget_allows():
    d = choose([KERNEL], 400 * MIB, {"attention-backend": "triton"})
    assert d["chosen"][0]["variant"] == "full" and d["left_out"] == []


def test_required_before_optional_and_optional_left_out_with_what_it_disables():
    opt = Candidate("ipython", (Variant("full", 8 * MIB),), required=False, disables="sglang.utils (notebooks)")
    d = choose([opt, FI], 15 * MIB, {})
    assert d["fits"] and [c["name"] for c in d["chosen"]] == ["flashinfer-python"]
    assert d["left_out"] == [{"name": "ipython", "required": False, "reason": "full is 8.0 MiB, 2.0 MiB left",
                              "disables": "sglang.utils (notebooks)"}]
    assert d["total"] == 13 * MIB


def test_exact_fit():
    assert choose([FI], 13 * MIB, {})["fits"]
    assert not choose([FI], 13 * MIB - 1, {})["fits"]


# The files of the pristine v0.5.16 bundle the H200 ran (tools/bundle.py --release 0.5.16 --slim-release
# --python 3.12 --platform manylinux_2_34_x86_64 --attention-backend triton --max-mib 60.5, commit 5dccbdd):
# each RUNTIME wheel's size in bytes, as pip fetched it at the release's pins (transformers 5.12.1,
# flashinfer-python 0.6.14, apache-tvm-ffi 0.1.11, sglang-kernel 0.4.5 and its slim copy), and the slim
# release wheel sglang-0.5.16+slim-cp312-cp312-manylinux_2_34_x86_64.whl
SIZES_0_5_16 = {
    "flashinfer-python": 14574383, "transformers": 11150587, "tokenizers": 3274982, "apache-tvm-ffi": 2697683,
    "pydantic": 494865, "pydantic-core": 2264846, "annotated-types": 13427, "typing-inspection": 14874,
    "fastapi": 159475, "starlette": 80571, "uvicorn": 87427, "python-multipart": 32585,
    "opentelemetry-api": 60335, "pyzmq": 855178, "orjson": 130612, "msgspec": 236624, "pybase64": 94689,
    "setproctitle": 32929, "partial-json-parser": 10877, "dill": 120019, "compressed-tensors": 260637,
    "loguru": 61595, "gguf": 118475, "openai": 1005551, "jiter": 338071, "distro": 20277, "sniffio": 10235,
    "jsonschema": 90630, "jsonschema-specifications": 18437, "referencing": 26766, "rpds-py": 371261,
    "soundfile": 1313646, "cffi": 221822, "pycparser": 62600}
KERNEL_0_5_16 = (Variant("full", 382990222),
                 Variant("slim", 15031806, "FA3", requires=(("attention-backend", "triton"),)))
RELEASE_0_5_16_SLIM = 9367040
STUBBABLE = ("soundfile", "cffi", "pycparser")     # the wheels e2e's stand-ins replace (soundfile's and its own)


def _release_candidates():
    from sgl_overlay.bundle import runtime_candidates
    return runtime_candidates({"sglang-kernel": list(KERNEL_0_5_16),
                               **{n: [Variant("full", s)] for n, s in SIZES_0_5_16.items()}})


def test_stubbable_wheels_are_the_optional_ones_and_go_last():
    cands = _release_candidates()
    assert sorted(c.name for c in cands if not c.required) == sorted(STUBBABLE)
    d = choose(list(reversed(cands)), 500 * MIB, {"attention-backend": "triton"})   # given first, placed last
    assert d["fits"] and d["left_out"] == []
    assert [c["name"] for c in d["chosen"]][-3:] == ["pycparser", "cffi", "soundfile"]


def test_release_0_5_16_at_60_5_mib_leaves_out_soundfile_and_nothing_required():
    """What is left of 60.5 MiB after the slim release wheel, the slim kernel and the required wheels
    (0.28 MiB) is less than soundfile's 1.25 MiB: it is the one left out; the bundle fits."""
    budget = int(60.5 * MIB) - RELEASE_0_5_16_SLIM
    required = 15031806 + sum(s for n, s in SIZES_0_5_16.items() if n not in STUBBABLE)
    left = budget - required
    assert SIZES_0_5_16["soundfile"] > left > SIZES_0_5_16["cffi"] + SIZES_0_5_16["pycparser"]
    d = choose(_release_candidates(), budget, {"attention-backend": "triton"})
    assert d["fits"]
    assert [x["name"] for x in d["left_out"]] == ["sglang-kernel (full)", "soundfile"]
    sf = d["left_out"][1]
    assert not sf["required"] and sf["reason"] == f"full is 1.3 MiB, {left / MIB:.1f} MiB left"
    assert "audio inputs" in sf["disables"]
    assert d["total"] == required + SIZES_0_5_16["cffi"] + SIZES_0_5_16["pycparser"]
    assert RELEASE_0_5_16_SLIM + d["total"] <= int(60.5 * MIB)


def test_an_optional_wheel_is_left_out_before_any_required_one():
    """A budget that fits every required wheel but one byte less than all of them: the required ones
    all go in, whatever the optional ones' sizes; one byte less still: a required wheel is left out
    and the bundle does not fit."""
    cands = _release_candidates()
    required = 15031806 + sum(s for n, s in SIZES_0_5_16.items() if n not in STUBBABLE)
    d = choose(cands, required, {"attention-backend": "triton"})
    assert d["fits"] and d["total"] == required
    assert {x["name"] for x in d["left_out"]} == {"sglang-kernel (full)", *STUBBABLE}
    d = choose(cands, required - 1, {"attention-backend": "triton"})
    assert not d["fits"]
    assert any(x["required"] for x in d["left_out"])


FI_SLIM = Candidate("flashinfer-python", (Variant("full", 13 * MIB),
                                          Variant("slim", 8 * MIB, "CUTLASS", requires=(("attention-backend", "triton"),))))
TRANSFORMERS = Candidate("transformers", (Variant("full", 10 * MIB),))


def test_a_slim_variant_is_taken_where_the_full_one_leaves_a_required_wheel_out():
    # 16 + 13 + 10 = 39 > 35: flashinfer's full copy fits when it is placed, transformers then does not
    d = choose([KERNEL, FI_SLIM, TRANSFORMERS], 35 * MIB, {"attention-backend": "triton"})
    assert d["fits"] and d["total"] == 34 * MIB
    assert [(c["name"], c["variant"]) for c in d["chosen"]] == [
        ("sglang-kernel", "slim"), ("flashinfer-python", "slim"), ("transformers", "full")]
    fi = next(x for x in d["left_out"] if x["name"] == "flashinfer-python (full)")
    assert fi["reason"] == "full is 13.0 MiB; a required wheel did not fit with it (transformers)"
    assert fi["disables"] == "CUTLASS"


def test_the_full_variant_stays_where_everything_fits_with_it():
    d = choose([KERNEL, FI_SLIM, TRANSFORMERS], 39 * MIB, {"attention-backend": "triton"})
    assert [c["variant"] for c in d["chosen"]] == ["slim", "full", "full"]


def test_slimming_what_can_be_slimmed_does_not_make_an_impossible_bundle_fit():
    d = choose([KERNEL, FI_SLIM, TRANSFORMERS], 30 * MIB, {"attention-backend": "triton"})
    assert not d["fits"] and [x["name"] for x in d["left_out"] if x["required"]] == ["transformers"]
    assert [(c["name"], c["variant"]) for c in d["chosen"]] == [("sglang-kernel", "slim"), ("flashinfer-python", "slim")]
