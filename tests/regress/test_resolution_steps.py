"""The steps of the release's own flag resolution (harness/child/resolution.py), one
at a time, each shown to do its thing and to be undone, on a real release's
code (v0.5.14: its ServerArgs, and its arg_groups/speculative_hook.py, where
the DFLASH rules live); then ``resolve`` as a whole leaves nothing behind,
when the release resolves and when a rule fails."""

import json
import os
import sys
import tempfile
import types

import pytest
import torch

from sgl_overlay.harness import layout
from sgl_overlay.harness.child import loader, resolution
from sgl_overlay.harness.child.drivers import inputs
from sgl_overlay.harness.child.release_parser import build
from sgl_overlay.harness.child.standins import MissingInput
from tests.regress import in_process

H200 = resolution.Hardware("NVIDIA H200", (9, 0), 143_771, 8, "12.8")


@pytest.fixture(scope="module")
def ctx(release_tree):
    """v0.5.14 installed for dflash-smoke, in this interpreter (as the child does)."""
    with in_process.context(layout.source_root(release_tree("0.5.14")), "dflash-smoke") as c:
        yield c


@pytest.fixture(scope="module")
def server_args_cls(ctx):
    return ctx.load("sglang.srt.server_args").ServerArgs


@pytest.fixture(scope="module")
def hook(ctx):
    return ctx.load("sglang.srt.arg_groups.speculative_hook")


def _cuda_state():
    names = ("is_available", "device_count", "get_device_capability", "get_device_name",
             "get_device_properties", "mem_get_info", "current_device")
    return {n: getattr(torch.cuda, n) for n in names}, torch.version.cuda


def test_torch_cuda_answers_the_scenario_device_for_the_block_only():
    before = _cuda_state()
    free = 100 << 30
    with pytest.raises(KeyError), resolution.torch_cuda_answers(H200, free):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 8
        assert torch.cuda.get_device_name(0) == "NVIDIA H200"
        assert torch.cuda.get_device_capability() == (9, 0)
        assert torch.cuda.get_device_properties(0).total_memory == 143_771 * (1 << 20)
        assert torch.cuda.mem_get_info() == (free, 143_771 * (1 << 20))
        assert torch.version.cuda == "12.8"
        raise KeyError("a rule failed")
    assert _cuda_state() == before


def test_model_directory_holds_the_config_then_is_gone():
    hf = types.SimpleNamespace(architectures=["Qwen3ForCausalLM"], num_hidden_layers=36, rope_scaling=None,
                               _private="left out", dtype=torch.bfloat16)  # not JSON: left out
    with resolution.model_directory(hf) as d:
        with open(os.path.join(d, "config.json")) as fh:
            assert json.load(fh) == {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36,
                                     "rope_scaling": None}
    assert not os.path.exists(d)
    with pytest.raises(RuntimeError), resolution.model_directory(None) as d:
        raise RuntimeError("the release refused")
    assert not os.path.exists(d)


def test_scenario_flags_are_taken_as_the_releases_parser_takes_them(server_args_cls, ctx):
    """v0.5.14 renamed --mamba-scheduler-strategy to --mamba-radix-cache-strategy; its parser keeps the
    old flag as an alias (dest mamba_radix_cache_strategy) and refuses a flag it does not declare."""
    names = resolution._fields(server_args_cls)
    assert "mamba_scheduler_strategy" not in names
    parser = lambda: build(ctx.root, server_args_cls)  # noqa: E731
    flags = resolution.scenario_flags({"tp_size": 2, "mamba_scheduler_strategy": "extra_buffer"}, names, parser)
    assert flags.given == {"tp_size": 2, "mamba_radix_cache_strategy": "extra_buffer"}
    assert flags.aliased == {"mamba_scheduler_strategy": "mamba_radix_cache_strategy"}
    with pytest.raises(resolution.FlagsRefused, match=r'refuses \[server\] no_such_flag \(--no-such-flag 1\): '
                                                      r'"unrecognized arguments: --no-such-flag 1"'):
        resolution.scenario_flags({"no_such_flag": 1}, names, parser)
    kept = resolution.scenario_flags({"mamba_scheduler_strategy": "no_buffer"}, ["mamba_scheduler_strategy"])
    assert kept.given == {"mamba_scheduler_strategy": "no_buffer"}   # a field: the parser is not asked


def test_scenario_class_records_reads_and_names_what_is_missing(server_args_cls):
    reads: set = set()
    sub = resolution.scenario_class(server_args_cls, reads)
    assert issubclass(sub, server_args_cls) and sub.__module__ == server_args_cls.__module__
    obj = object.__new__(sub)
    resolution.force_set(obj, "tp_size", 4)
    assert obj.tp_size == 4 and "server_args.tp_size" in reads
    with pytest.raises(MissingInput, match="server_args.model_config_of_a_later_release"):
        obj.model_config_of_a_later_release  # noqa: B018 - no field, no default: not provided
    with pytest.raises(AttributeError):
        obj._private_thing  # noqa: B018
    assert "server_args._private_thing" not in reads


def test_trace_rule_methods_on_the_subclass_only(server_args_cls):
    rule = vars(server_args_cls)["_handle_gpu_memory_settings"]
    sub = resolution.scenario_class(server_args_cls, set())
    rec = resolution.Recorder(None, [])
    resolution.trace_rule_methods(sub, server_args_cls, rec)
    assert vars(sub)["_handle_gpu_memory_settings"].__wrapped__ is rule
    assert "__post_init__" not in vars(sub)  # dunder methods are not rules
    assert vars(server_args_cls)["_handle_gpu_memory_settings"] is rule  # the release's class is untouched


def test_recorder_attributes_a_change_to_the_innermost_rule():
    obj = types.SimpleNamespace(a=1, b=1)
    rec = resolution.Recorder(obj, ["a", "b"])

    def inner():
        obj.b = 2

    def outer():
        obj.a = 2
        rec.wrap(inner, "Args.inner")()

    rec.wrap(outer, "Args.outer")()
    assert rec.rule_of == {"a": "Args.outer", "b": "Args.inner"}


def test_config_of_answers_the_drafter_by_its_paths():
    target, draft = types.SimpleNamespace(name="target"), types.SimpleNamespace(name="draft")
    get_config = resolution.config_of(target, draft, ("z-lab/drafter", "/tmp/sglo-model-x"))
    assert get_config("z-lab/drafter") is draft and get_config("/tmp/sglo-model-x") is draft
    assert get_config("Qwen/Qwen3-8B") is target
    with pytest.raises(MissingInput, match="hf_config"):
        resolution.config_of(None, None, (None, None))("Qwen/Qwen3-8B")


def test_import_rule_modules_loads_the_whole_package(ctx):
    resolution.import_rule_modules(ctx.finder.real)
    groups = [m for m in ctx.finder.real if m.startswith("sglang.srt.arg_groups")]
    assert "sglang.srt.arg_groups.speculative_hook" in groups
    assert all(m in sys.modules and not loader.is_stub(sys.modules[m]) for m in groups)


def test_standins_answered_rebinds_what_took_a_standin(ctx):
    """v0.5.14's server_args.py imports is_cuda from sglang.srt.utils, a stand-in here."""
    module = ctx.load("sglang.srt.server_args")
    standin = vars(module)["is_cuda"]
    assert loader.is_stub(standin)
    answer = lambda: True  # noqa: E731
    with resolution.standins_answered({"is_cuda": answer, "tp_size": 3}):
        assert module.is_cuda is answer
        assert not hasattr(module, "tp_size")  # only names a module took from a stand-in
    assert module.is_cuda is standin


def test_hooks_traced_for_the_block_only(hook):
    rule, entry = vars(hook)["_handle_dflash"], vars(hook)["handle_speculative_decoding"]
    helper = vars(hook)["_maybe_disable_adaptive"]  # not a rule by its name
    rec = resolution.Recorder(None, [])
    with pytest.raises(ValueError), resolution.hooks_traced(rec):
        assert hook._handle_dflash is not rule and hook._handle_dflash.__wrapped__ is rule
        assert hook.handle_speculative_decoding.__wrapped__ is entry
        assert hook._maybe_disable_adaptive is helper
        raise ValueError("the release refused")
    assert hook._handle_dflash is rule and hook.handle_speculative_decoding is entry


def test_registered_fakes_for_the_block_only(ctx):
    # server_args.py is what imports sglang.srt.utils (a stand-in here); loaded by
    # this test itself, since under xdist the module's other tests may have run in
    # another worker, or in this one before an earlier context was closed
    ctx.load("sglang.srt.server_args")
    standin = sys.modules["sglang.srt.utils"]
    before = dict(loader.StubRegistry.fakes)
    answer = lambda *a, **k: "answered"  # noqa: E731
    with loader.registered_fakes({"sglo_lazily_imported": answer}):
        assert standin.sglo_lazily_imported is answer  # imported inside a rule, after the answers
    assert loader.StubRegistry.fakes == before
    assert loader.is_stub(standin.sglo_lazily_imported)


def _undone_state(hook):
    return _cuda_state(), dict(loader.StubRegistry.fakes), vars(hook)["_handle_dflash"]


def test_resolve_leaves_nothing_behind(ctx, server_args_cls, hook, tmp_path, monkeypatch):
    """The DFLASH rule of v0.5.14 (speculative_hook._handle_dflash, read by hand
    in docs/regress.md) takes the draft tokens from the block size, 16."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the model directories go
    before = _undone_state(hook)
    mc = inputs.model(ctx)[0]
    hf = {"target": mc.hf_config, "draft": inputs.draft_hf_config(ctx)}
    obj, changes, _ = resolution.resolve(ctx, server_args_cls, mc, hf)
    by_flag = {c["flag"]: c for c in changes}
    assert by_flag["speculative_num_draft_tokens"]["resolved"] == 16
    assert by_flag["speculative_num_draft_tokens"]["rule"] == "speculative_hook._handle_dflash"
    assert obj.speculative_draft_model_path == ctx.req["server"]["speculative_draft_model_path"]
    assert _undone_state(hook) == before
    assert list(tmp_path.iterdir()) == []


def test_resolve_undoes_its_steps_when_a_rule_fails(ctx, server_args_cls, hook, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def refuses(server_args):
        server_args.speculative_num_draft_tokens = 7
        raise ValueError("DFLASH refused")

    monkeypatch.setattr(hook, "_handle_dflash", refuses)
    before = _undone_state(hook)
    ctx.figures.pop("resolution", None)
    mc = inputs.model(ctx)[0]
    with pytest.raises(ValueError, match="DFLASH refused"):
        resolution.resolve(ctx, server_args_cls, mc, {"target": mc.hf_config, "draft": inputs.draft_hf_config(ctx)})
    # what the release changed before it refused is recorded
    assert {c["flag"]: c["resolved"] for c in ctx.figures["resolution"]}["speculative_num_draft_tokens"] == 7
    assert _undone_state(hook) == before
    assert list(tmp_path.iterdir()) == []
