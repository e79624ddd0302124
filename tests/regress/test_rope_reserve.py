"""The RoPE pre-expansion between "Load weight end" and the sizing's reading
(``sgl_overlay.harness.child.rope_reserve``), against the releases' own code and PyTorch's
caching allocator rules (c10/cuda/CUDACachingAllocator.cpp: kSmallSize 1 MiB -> kSmallBuffer
2 MiB, below kMinLargeAlloc 10 MiB -> kLargeBuffer 20 MiB, else a multiple of kRoundLarge 2 MiB).
The measured H200 starts and the public logs are in test_public_logs.py."""

import pytest

from sgl_overlay.harness import source_root
from sgl_overlay.harness.child import rope_reserve

MIB = 1 << 20


@pytest.mark.parametrize("nbytes, segment", [
    (1, 2 * MIB), (MIB, 2 * MIB),                       # the small pool
    (MIB + 1, 20 * MIB), (10 * MIB - 512, 20 * MIB),    # one large buffer
    (10 * MIB, 10 * MIB), (10 * MIB + 1, 12 * MIB),     # rounded to 2 MiB from 10 MiB
    (37_785_600, 38 * MIB), (67_108_864, 64 * MIB),
])
def test_segment_bytes_follow_the_allocator(nbytes, segment):
    assert rope_reserve.segment_bytes(nbytes) == segment


def test_releases_without_the_call_grow_nothing(release_tree):
    """v0.5.5's load_model has no reserve_rope_cache_for_long_sequences: nothing is grown."""
    rel = rope_reserve.release_rope(source_root(release_tree("0.5.5")))
    assert not rel.grows
    model = {"kind": "dense", "context_len": 40960, "max_position_embeddings": 8192, "head_dim": 128}
    assert rope_reserve.scenario_expansion_bytes(model, {}, rel) == 0


def test_the_tree_s_constants(release_tree):
    """v0.5.18's environ.py: margin 256, align 128, speculative factor 2; qwen3_vl.py's vision
    rotary embedding is built with max_position=8192 and rotary_dim=head_dim // 2."""
    rel = rope_reserve.release_rope(source_root(release_tree("0.5.18")))
    assert (rel.grows, rel.margin, rel.align, rel.spec_safety, rel.vision_rows) == (True, 256, 128, 2, 8192)


def test_speculative_rows_are_reserved():
    """reserve = context + steps x draft tokens x 2 + 256, aligned to 128: 32,768 + 3 x 4 x 2 + 256 =
    33,048 -> 33,152; the needed position 33,151 grows a 32,768-row cache to 33,152 rows
    (``(needed + align) // align * align``) and leaves a 40,960-row one."""
    rel = rope_reserve.ReleaseRope(grows=True, margin=256, align=128, spec_safety=2, vision_rows=8192)
    assert rope_reserve.reserve_rows(32768, 3, 4, rel) == 33152
    cache = rope_reserve.RopeCache("text", 32768, 128)
    assert rope_reserve.grown_rows(cache, 33152, 128) == 33152
    assert rope_reserve.grown_rows(rope_reserve.RopeCache("text", 40960, 128), 33152, 128) is None


def test_missing_inputs_are_named():
    rel = rope_reserve.ReleaseRope(grows=True, margin=256, align=128, spec_safety=2, vision_rows=8192)
    with pytest.raises(rope_reserve.RopeInputsError, match="max_position_embeddings"):
        rope_reserve.model_caches({"kind": "dense", "head_dim": 128, "architectures": ["X"]}, rel)
    with pytest.raises(rope_reserve.RopeInputsError, match="vision_config"):
        rope_reserve.model_caches({"kind": "qwen3_5", "text_config": {"max_position_embeddings": 8192,
                                                                      "head_dim": 128}}, rel)
