"""Each release's own flag resolution (harness/child/resolution.py): its ServerArgs
construction, run on the scenario's flags, with only the hardware probes
answered from the scenario.

The expected changes are read by hand from the releases' code (docs/harness.md,
"The release's own flag resolution"), never taken from the harness's output.
"""

import pytest

from sgl_overlay.harness import Outcome, load_scenario, run_scenario


def _changes(report):
    return {c["flag"]: c for c in report.figures.get("resolution") or []}


def _run(release_tree, version, scenario):
    return run_scenario(release_tree(version), load_scenario(scenario), verify_remedy=False)


def test_h200_memory_settings_v0_5_12_post1(release_tree):
    """ServerArgs._handle_gpu_memory_settings, v0.5.12.post1: a card under 160 GiB
    (the H200's 143,771 MiB) at TP < 4 gets chunked prefill 8192 and CUDA-graph
    batch sizes up to 256 when neither flag is given."""
    ch = _changes(_run(release_tree, "0.5.12.post1", "healthy-h200-8b"))
    assert ch["chunked_prefill_size"]["given"] is None
    assert ch["chunked_prefill_size"]["resolved"] == 8192
    assert ch["chunked_prefill_size"]["rule"] == "ServerArgs._handle_gpu_memory_settings"
    assert ch["cuda_graph_max_bs"]["resolved"] == 256
    assert ch["cuda_graph_max_bs"]["rule"] == "ServerArgs._handle_gpu_memory_settings"
    assert "mem_fraction_static" not in ch  # given (0.911): the release keeps it


def test_dflash_overlap_rule_v0_5_12_post1(release_tree):
    """ServerArgs._handle_speculative_decoding, v0.5.12.post1: DFLASH turns the
    overlap scheduler off ("spec v2 is not supported yet") and takes the draft
    tokens from the block size (16)."""
    ch = _changes(_run(release_tree, "0.5.12.post1", "dflash-smoke"))
    assert ch["disable_overlap_schedule"]["given"] is False
    assert ch["disable_overlap_schedule"]["resolved"] is True
    assert ch["disable_overlap_schedule"]["rule"] == "ServerArgs._handle_speculative_decoding"
    assert ch["speculative_num_draft_tokens"]["resolved"] == 16


def test_dflash_overlap_rule_dropped_v0_5_14(release_tree):
    """v0.5.14 moved the DFLASH rules to arg_groups/speculative_hook._handle_dflash
    and dropped the overlap-scheduler rule."""
    ch = _changes(_run(release_tree, "0.5.14", "dflash-smoke"))
    assert "disable_overlap_schedule" not in ch
    assert ch["speculative_num_draft_tokens"]["resolved"] == 16
    assert ch["speculative_num_draft_tokens"]["rule"] == "speculative_hook._handle_dflash"


def test_hybrid_radix_cache_kept_v0_5_12_post1(release_tree):
    """configs/linear_attn_model_registry (real, not a stand-in): Qwen3.5 supports
    the Mamba radix cache, so extra_buffer with the radix cache on is kept and the
    run reaches the sizing (the incident's broken B2: 0 requests)."""
    report = _run(release_tree, "0.5.12.post1", "zero-requests-dflash")
    assert "disable_radix_cache" not in _changes(report)
    assert report.outcome is Outcome.BROKEN


@pytest.mark.parametrize("version", ["0.5.5", "0.5.9", "0.5.13", "0.5.16", "0.5.17", "0.5.19", "0.5.22", "0.5.23"])
def test_every_era_resolves(release_tree, version):
    """The release's ServerArgs is built by its own code in every era (dataclass
    __post_init__; arg_groups hooks; v0.5.22+ msgspec Struct and resolve_once):
    the healthy control resolves and sizes, and every change names its rule."""
    report = _run(release_tree, version, "healthy-h200-8b")
    assert report.outcome is Outcome.OK, report.reason
    changes = report.figures["resolution"]
    assert changes and all(c["rule"] for c in changes)
    assert all(c["given"] != c["resolved"] for c in changes)


@pytest.mark.parametrize("drop", [("capability", "total_mib"), ("device_name", "capability", "total_mib")])
def test_a_scenario_without_the_device_keys_names_them(pristine_tree, tmp_path, drop):
    """The release's flag rules probe the device; a scenario whose [gpu] table lacks
    device_name, capability or total_mib is untestable, and the reason names exactly
    the keys the file lacks, with [gpu] lines that give them (valid TOML)."""
    import tomllib
    from sgl_overlay.harness.scenario import SCENARIO_DIR

    text = (SCENARIO_DIR / "healthy-h200-8b.toml").read_text()
    kept = [line for line in text.splitlines() if not line.startswith(tuple(f"{k} =" for k in drop))]
    path = tmp_path / "no-device.toml"
    path.write_text("\n".join(kept) + "\n")
    assert all(k not in tomllib.loads(path.read_text())["gpu"] for k in drop)

    report = run_scenario(pristine_tree, load_scenario(str(path)), verify_remedy=False)     # the pin
    assert report.outcome is Outcome.UNTESTABLE, report.reason
    reason = report.reason
    assert f"[gpu] table lacks {', '.join(drop)} (" in reason, reason
    assert "tools/sgl_overlay" not in reason and ".py" not in reason, reason
    snippet = tomllib.loads(reason.split("e.g.\n", 1)[1])
    assert set(snippet) == {"gpu"} and set(snippet["gpu"]) == set(drop), reason
    if "capability" in drop:
        assert snippet["gpu"]["capability"] == [9, 0]
