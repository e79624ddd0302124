"""The run's import environment (harness/child/drivers/context.py), one step at a
time: each does its thing and is undone.  The child interpreter is the
isolation boundary between runs; these show that the steps themselves leave
nothing behind either, on a real release tree (v0.5.14)."""

import importlib.util
import os
import sys

import pytest

from sgl_overlay.harness import layout, load_scenario
from sgl_overlay.harness.child import loader, standins
from sgl_overlay.harness.child.drivers import context as context_mod
from sgl_overlay.harness.environment import sglang_settings
from sgl_overlay.harness.child.drivers import Context
from tests.regress import in_process

TRANSFORMERS = ("transformers", "transformers.configuration_utils", "transformers.utils",
                "transformers.utils.logging")


def _sglang_modules():
    return [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]


@pytest.fixture(scope="module")
def tree(release_tree):
    return layout.source_root(release_tree("0.5.14"))


def test_transformers_standin_for_the_block_only():
    before = {name: sys.modules.get(name) for name in TRANSFORMERS}
    with standins.transformers_standin() as installed:
        assert installed is True
        from transformers import PretrainedConfig  # what SGLang's config classes subclass

        cfg = PretrainedConfig(num_hidden_layers=36)
        assert cfg.num_hidden_layers == 36 and cfg.get_text_config() is cfg
        with standins.transformers_standin() as again:  # already in place: not installed twice
            assert again is False
        assert sys.modules["transformers"].__sgl_overlay_standin__
    assert {name: sys.modules.get(name) for name in TRANSFORMERS} == before


def test_triton_standin_where_triton_is_missing(monkeypatch):
    for name in standins.TRITON_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else real_find_spec(name, *a))
    with standins.triton_standin() as names:
        assert names == ["triton", "triton.language"]
        import triton.language as tl  # a release's module-level import of the GPU compiler

        assert loader.is_stub(tl) and loader.is_stub(tl.constexpr)
    assert not [name for name in standins.TRITON_MODULES if name in sys.modules]


def test_triton_standin_leaves_an_installed_triton_alone(monkeypatch):
    marker = type(sys)("triton")
    monkeypatch.setitem(sys.modules, "triton", marker)
    with standins.triton_standin() as names:
        assert names == []
        assert sys.modules["triton"] is marker
    assert sys.modules["triton"] is marker


def test_real_modules_are_those_the_tree_has(tree):
    """v0.5.14 has the flag-resolution package (arg_groups/) and no DDTREE
    module (a patched tree's), so the first are real and the second is not."""
    real = context_mod.real_modules(tree, layout.detect(tree))
    assert "sglang.srt.server_args" in real
    assert "sglang.srt.arg_groups.speculative_hook" in real
    assert "sglang.srt.arg_groups" in real  # the package's __init__.py
    assert "sglang.srt.speculative.ddtree_algo" not in real
    assert all(context_mod.module_exists(tree, m) for m in real)


def test_scenario_fakes_answer_the_drafter_config_only_when_given():
    gpu = standins.GPU(40.0, 1, 1)
    assert "get_config" not in context_mod.scenario_fakes(gpu, {"draft": None})
    fakes = context_mod.scenario_fakes(gpu, {"draft": {"hf_config": {"block_size": 16}}})
    assert fakes["get_config"]("/any/path").block_size == 16
    assert fakes["get_available_gpu_memory"]() == 40.0


def test_context_installs_the_tree_and_close_undoes_it(tree):
    meta_path, fakes = list(sys.meta_path), dict(loader.StubRegistry.fakes)
    transformers = {name: sys.modules.get(name) for name in TRANSFORMERS}
    assert not _sglang_modules()
    with in_process.context(tree, "dflash-smoke") as ctx:
        assert sys.meta_path[0] is ctx.finder
        server_args = ctx.load("sglang.srt.server_args")
        assert server_args.__file__ == str(tree / "sglang" / "srt" / "server_args.py")  # the tree's own code
        assert loader.is_stub(sys.modules["sglang.srt.utils"])  # a module not under test: a stand-in
        # the scenario's memory readings, wherever a module asks a stand-in for them
        assert loader.StubRegistry.fakes["get_available_gpu_memory"] == ctx.gpu.get_available_gpu_memory
        assert sys.modules["transformers"].__sgl_overlay_standin__
    assert sys.meta_path == meta_path
    assert not _sglang_modules()
    assert loader.StubRegistry.fakes == fakes
    assert {name: sys.modules.get(name) for name in TRANSFORMERS} == transformers
    # the release's environ.py copied SGL_OVERLAY_* to SGLANG_OVERLAY_* at import: not the
    # harness's to undo (the child's end does), but no other test may see them
    assert sglang_settings(os.environ) == {}


def test_context_gives_back_what_it_took_when_a_step_fails(tree, monkeypatch):
    """The finder's step fails (a layout whose real module list cannot be read):
    the stand-ins installed before it are gone again."""

    class Broken:
        @property
        def real(self):
            raise RuntimeError("no module list")

    transformers = {name: sys.modules.get(name) for name in TRANSFORMERS}
    meta_path = list(sys.meta_path)
    with pytest.raises(RuntimeError, match="no module list"):
        Context(tree, Broken(), load_scenario("dflash-smoke").to_request())
    assert {name: sys.modules.get(name) for name in TRANSFORMERS} == transformers
    assert sys.meta_path == meta_path
