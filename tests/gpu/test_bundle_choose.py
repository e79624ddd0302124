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
