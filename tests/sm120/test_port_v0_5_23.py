"""patches/ports/v0.5.23/sm120: the sm120 topic ported to SGLang v0.5.23
(docs/sm120.md, "v0.5.23 port").

The subject tree (``port_tree``): ``--tree DIR`` when given (the export runs
each patch's ``Evidence:`` tests on v0.5.23 with the earlier patches of the
series, then with that patch too), else v0.5.23 with the whole port series
applied strictly (tests/port_tree.py) in pytest's temporary directory.  ``v0523_tree`` is the
pristine release.

Two ways to run the release's own code on a CPU:
- start-up flags: the regression harness runs the tree's real ServerArgs
  resolution (v0.5.23's resolution pipeline, model overrides and
  post-process passes) on a scenario whose ``[gpu]`` is the simulated
  device, and reports every flag a rule changed (``figures["resolution"]``);
- modules: the simulated device of support.py (``on_device``).

The ``test_upstream_*`` tests check what the port drops because v0.5.23
already does it; they pass on the pristine release.
"""
import importlib.util
import logging
import re
import sys
import types
import unittest
from pathlib import Path

import pytest

from sgl_overlay import release_trees
from sgl_overlay.harness.child import loader
from sgl_overlay.harness.layout import source_root
from sgl_overlay.harness.child.resolution import _platform

from tests import port_tree as port_series

from .support import DEVICES, PDMUX, SM120, SPLITS, pdmux_stream_groups, resolved, tree_helpers

LABEL = "0.5.23"
SERIES_DIR = port_series.PORTS / "sm120"


@pytest.fixture(scope="module")
def v0523_tree():
    return release_trees.release_tree(LABEL)


@pytest.fixture(scope="module")
def series_tree(tmp_path_factory):
    """v0.5.23 + the whole port series, always built (it holds the series' test/ files)."""
    return port_series.build(SERIES_DIR, tmp_path_factory.mktemp("sm120-port") / "sglang")


@pytest.fixture(scope="module")
def port_tree(request):
    given = request.config.getoption("--tree")
    if given:
        return Path(given).resolve()
    return request.getfixturevalue("series_tree")


# ---- start-up resolution through the harness (support.resolved) ----------------

FUSION = "flashinfer_allreduce_fusion_backend"


def test_fusion_backend_is_turned_off_on_sm120(port_tree):
    """--enable-flashinfer-allreduce-fusion, TP 2 on SM12x: v0.5.23 maps it to
    backend "auto" and keeps it (then _resolve_backend raises at the workspace
    pre-initialisation); the port leaves the backend off (None, no change)."""
    got = resolved(port_tree, tp=2, enable_flashinfer_allreduce_fusion=True)
    assert got.get(FUSION, (None,))[0] is None, got.get(FUSION)
    assert got["enable_flashinfer_allreduce_fusion"] == (False, "_handle_deprecated_args")


def test_explicit_fusion_backend_is_turned_off_on_sm120(port_tree):
    got = resolved(port_tree, tp=2, flashinfer_allreduce_fusion_backend="trtllm")
    # no entry: no rule changed the given backend
    assert got.get(FUSION, ("trtllm", None)) == (None, "_sm120_allreduce_fusion_disable")


@pytest.mark.parametrize("device_key", ["h200", "b200"])
def test_fusion_controls_unchanged(device_key, v0523_tree, port_tree):
    got = [resolved(t, device_key, tp=2, enable_flashinfer_allreduce_fusion=True).get(FUSION)
           for t in (v0523_tree, port_tree)]
    assert got == [("auto", "_handle_deprecated_args")] * 2


def test_fusion_on_sm120_fails_late_on_the_release(v0523_tree, on_device):
    """Why the backend must not stay on: v0.5.23's own backend check, which the
    runner reaches when it pre-initialises the fusion workspace (TP >= 2),
    refuses SM12x."""
    root = source_root(v0523_tree)
    module = "sglang.srt.layers.flashinfer_comm_fusion"
    with on_device(v0523_tree, SM120, [module]) as load:
        platform = _platform(root, tree_helpers(root))
        fusion = load(module)
        fusion.get_platform = lambda: platform
        with pytest.raises(ValueError, match="requires SM90 or SM10X"):
            fusion._resolve_backend("auto", False)


def test_olmo2_default_backend_on_sm120_is_triton(port_tree):
    """v0.5.23's _olmo2_overrides gives fa3 to any CUDA device_sm >= 80 but SM100,
    i.e. to SM12x, where create_flashattention_v3_backend refuses it."""
    assert resolved(port_tree)["attention_backend"] == ("triton", "_olmo2_overrides")


@pytest.mark.parametrize("device_key,backend", [("h200", "fa3"), ("b200", "trtllm_mha")])
def test_olmo2_controls_unchanged(device_key, backend, v0523_tree, port_tree):
    got = [resolved(t, device_key)["attention_backend"] for t in (v0523_tree, port_tree)]
    assert got == [(backend, "_olmo2_overrides")] * 2


def test_fa3_backend_refuses_sm120_on_the_release(v0523_tree, on_device):
    """The refusal the pristine Olmo2 default runs into (unchanged by the port)."""
    module = "sglang.srt.layers.attention.attention_registry"
    with on_device(v0523_tree, SM120, [module]) as load:
        reg = load(module)
        with pytest.raises(AssertionError, match="requires SM>=80 and SM<=90"):
            reg.create_flashattention_v3_backend(types.SimpleNamespace(use_mla_backend=False))


# ---- PD multiplexing (simulated device) ----------------------------------------

def test_pdmux_on_sm120(port_tree, on_device, monkeypatch):
    assert pdmux_stream_groups(on_device, port_tree, SM120, monkeypatch) == SPLITS[188]


def test_pdmux_on_b200(port_tree, on_device, monkeypatch):
    assert pdmux_stream_groups(on_device, port_tree, "b200", monkeypatch) == SPLITS[148]


def test_pdmux_on_h200_unchanged(v0523_tree, port_tree, on_device, monkeypatch):
    got = [pdmux_stream_groups(on_device, t, "h200", monkeypatch) for t in (v0523_tree, port_tree)]
    assert got == [SPLITS[132]] * 2


# ---- what v0.5.23 already does (dropped from the port) --------------------------

SYMM_MEM = "sglang.srt.distributed.device_communicators.torch_symm_mem"
SYMM_MEM_MODULES = [SYMM_MEM, "sglang.srt.distributed.device_communicators.all_reduce_utils"]


def test_upstream_symm_mem_declines_sm120(v0523_tree, on_device, monkeypatch, caplog):
    """sm120-communication.patch's KeyError: 12 half: v0.5.23 looks the size
    table up with .get() (69b02ea68a, #24548) and stays disabled."""
    import torch

    caplog.set_level(logging.WARNING)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 8)
    with on_device(v0523_tree, SM120, SYMM_MEM_MODULES) as load:
        mod = load(SYMM_MEM)
        monkeypatch.setattr(mod, "torch_symm_mem_available", True)
        comm = mod.TorchSymmMemCommunicator(types.SimpleNamespace(group_name="tp"), 0)
    assert (comm.disabled, comm.buffer, comm.max_size) == (True, None, 0)
    assert any("Device capability 12 not supported" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


CONFIGURER = "sglang.srt.layers.deep_gemm_wrapper.configurer"
SM120_DEEP_GEMM_APIS = ("fp8_einsum", "m_grouped_fp8_fp4_gemm_nt_contiguous",
                        "transform_sf_into_required_layout")


@pytest.mark.parametrize("has_sm120_kernels,expected", [
    (False, dict(enable=False, blackwell=False, ue8m0=False)),
    (True, dict(enable=True, blackwell=False, ue8m0=True)),
])
def test_upstream_deep_gemm_on_sm120(has_sm120_kernels, expected, v0523_tree, on_device, monkeypatch):
    """sm120-kernel-tables.patch's DeepGEMM half: v0.5.23 enables DeepGEMM on
    12.x only where the installed deep_gemm has its SM120 kernels, with UE8M0
    scales, never the SM100 (Blackwell) path."""
    deep_gemm = types.ModuleType("deep_gemm")
    for name in SM120_DEEP_GEMM_APIS if has_sm120_kernels else ():
        setattr(deep_gemm, name, lambda *a, **k: None)
    monkeypatch.setitem(sys.modules, "deep_gemm", deep_gemm)
    monkeypatch.delenv("SGLANG_ENABLE_JIT_DEEPGEMM", raising=False)
    root = source_root(v0523_tree)
    platform = _platform(root, tree_helpers(root))
    with on_device(v0523_tree, SM120, [CONFIGURER], get_platform=lambda: platform) as load:
        c = load(CONFIGURER)
        got = dict(enable=c.ENABLE_JIT_DEEPGEMM, blackwell=c.DEEPGEMM_BLACKWELL, ue8m0=c.DEEPGEMM_SCALE_UE8M0)
    assert got == expected


# ---- the series' upstream-style unit tests (test/registered/unit/...) -------------
# SGLang runs them with its own dependencies installed; here each file runs with
# the tree's modules it needs loaded for real (the loader's stand-ins for the
# rest, e.g. sglang.test.ci.ci_register).

ARG_GROUPS = ["sglang.srt.environ", "sglang.srt.runtime_context", "sglang.srt.arg_groups.model_override_base"]
UPSTREAM_TESTS = {
    "test/registered/unit/server_args/test_sm120_allreduce_fusion.py":
        ARG_GROUPS + ["sglang.srt.arg_groups.overrides"],
    "test/registered/unit/multiplex/test_pdmux_arch_constraints.py": [PDMUX],
    "test/registered/unit/server_args/test_olmo2_default_attention_backend.py":
        ARG_GROUPS + ["sglang.srt.arg_groups.model_overrides.olmo2"],
}


EXCEPTION_LINE = re.compile(r"^[A-Za-z_.]*(Error|Exception)\b")


def run_unit_test_file(tree, path: Path, real) -> unittest.TestResult:
    """The unittest cases of ``path`` run against ``tree``'s modules; an error
    importing the file is one error of the result."""
    result = unittest.TestResult()
    with loader.installed(source_root(tree), real):
        spec = importlib.util.spec_from_file_location(f"upstream_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception:  # noqa: BLE001 - reported as the result
            result.addError(unittest.FunctionTestCase(lambda: None, description=str(path)), sys.exc_info())
            return result
        unittest.defaultTestLoader.loadTestsFromModule(module).run(result)
    return result


def problems(result):
    """(test, the exception line of its traceback) for each error and failure."""
    out = []
    for test, tb in result.errors + result.failures:
        lines = tb.strip().splitlines()
        out.append((str(test), next((l for l in reversed(lines) if EXCEPTION_LINE.match(l)), lines[-1])))
    return out


@pytest.mark.parametrize("relpath", sorted(UPSTREAM_TESTS))
def test_upstream_unit_test_passes_on_the_port(relpath, series_tree):
    result = run_unit_test_file(series_tree, series_tree / relpath, UPSTREAM_TESTS[relpath])
    assert result.testsRun >= 3 and result.wasSuccessful(), problems(result)


@pytest.mark.parametrize("relpath,reason", [
    ("test/registered/unit/server_args/test_sm120_allreduce_fusion.py",
     "ImportError: cannot import name '_sm120_allreduce_fusion_disable'"),
    ("test/registered/unit/multiplex/test_pdmux_arch_constraints.py",
     "ValueError: Unsupported compute capability: 12.0"),
    ("test/registered/unit/server_args/test_olmo2_default_attention_backend.py",
     "AssertionError: 'fa3' != 'triton'"),
])
def test_upstream_unit_test_fails_on_the_release(relpath, reason, v0523_tree, series_tree):
    result = run_unit_test_file(v0523_tree, series_tree / relpath, UPSTREAM_TESTS[relpath])
    assert not result.wasSuccessful()
    assert any(last.startswith(reason) for _, last in problems(result)), problems(result)
