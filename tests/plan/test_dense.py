"""A dense model on an H200 and an RTX 5090, on the pin: the plan's numbers are the harness's
numbers for the same figures (one code path: both are harness runs of the same tree), and the
regression oracle's, derived by hand from the release's formulas (tests/regress/oracle.py)."""

import dataclasses

import pytest

from sgl_overlay.harness import Outcome, load_scenario, run_scenario
from sgl_overlay.planner import core, deployment

from ..regress import oracle
from .helpers import LLAMA8B, LLAMA8B_NOINDEX, PIN


def _scenario_with(dep):
    """The healthy-h200-8b scenario (a Llama-3.1-8B-shaped model) with the plan's figures: its readings
    and their kind (an estimate is of "Load weight begin": readings = "logged"), and the config's RoPE
    fields the readings model reads."""
    sc = load_scenario("healthy-h200-8b")
    gpu = dict(sc.gpu, **dep.request()["gpu"])   # the plan's device, readings, their kind and rounding
    planned = dep.request()["model"]
    model = dict(sc.model, **{k: planned[k] for k in ("max_position_embeddings", "rope_scaling") if k in planned})
    server = dict(sc.server, mem_fraction_static=dep.fields["mem_fraction_static"])
    return dataclasses.replace(sc, gpu=gpu, model=model, server=server)


def test_h200_with_the_scenarios_figures_gives_the_scenarios_numbers():
    """The scenario file's figures as --free-gib: the oracle's KV tokens and running requests for the
    pin (918,523 / 3,587 on v0.5.17; the oracle gives the same on every release 0.5.5-0.5.23)."""
    dep = deployment(model=LLAMA8B, argv=["--mem-fraction-static", "0.911"], release=PIN,
                     free_gib=[139.5, 124.54])
    s = core.size(dep)
    rep = run_scenario(dep.tree.root, load_scenario("healthy-h200-8b"))
    want = oracle.expect(PIN, "healthy-h200-8b").figures
    want = (want["max_total_num_tokens"], want["max_running_requests"])
    assert (s.ledger["kv_tokens"], s.ledger["running_requests"]) == want
    assert (rep.figures["max_total_num_tokens"], rep.figures["max_running_requests"]) == want
    assert s.verdict == core.STARTS


@pytest.mark.parametrize("gpu,mfs", [("H200", "0.911"), ("RTX 5090", "0.85")])
def test_estimated_plan_equals_the_harness_on_the_same_figures(gpu, mfs):
    dep = deployment(model=LLAMA8B, gpu=gpu, argv=["--mem-fraction-static", mfs], release=PIN)
    s = core.size(dep)
    rep = run_scenario(dep.tree.root, _scenario_with(dep))
    assert rep.outcome is s.outcome is Outcome.OK
    assert s.readings == rep.readings and s.readings["kind"] == "logged"   # one readings model for both
    assert s.ledger["kv_tokens"] == rep.figures["max_total_num_tokens"] > 0
    assert s.ledger["running_requests"] == rep.figures["max_running_requests"] > 0
    assert s.ledger["cell_size_bytes_per_token"] == 131072  # 32 layers x 8 KV heads x 128 x K+V x bf16


def test_weights_from_the_config_match_the_published_index():
    """Without an index file, the weights are estimated from config.json (transformers'
    LlamaForCausalLM on the meta device, said so); for Llama-3.1-8B that is the
    published total_size exactly."""
    with_index = deployment(model=LLAMA8B, gpu="H200", argv=["--mem-fraction-static", "0.9"], release=PIN)
    from_count = deployment(model=LLAMA8B_NOINDEX, gpu="H200", argv=["--mem-fraction-static", "0.9"], release=PIN)
    assert with_index.model.weights_bytes == from_count.model.weights_bytes == 16060522496
    assert "model.safetensors.index.json" in with_index.model.weights_source
    assert from_count.model.weights_method == "config"
    assert "estimated from config.json" in from_count.model.weights_source
