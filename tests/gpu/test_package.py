"""tools.gpu is a package the GPU machine runs with `python3 -m tools.gpu.NAME` from a copy of the
checkout, with its own Python and torch and nothing of this project installed (docs/gpu.md): every
module imports with the standard library alone (no site-packages at all: `python -S`), but for the
few that say what else they need, and every command's --help answers that way."""
import pkgutil
import subprocess
import sys

import pytest

from tests.by_path import ROOT

# what a module needs beyond the standard library at import time, and why (docs/gpu.md, "Synopsis")
NEEDS = {"tools.gpu.e2e_plan": "sgl_overlay (a CPU tool)", "tools.gpu.ddtree_check": "torch (torch only)",
         "tools.gpu.spec_accept": "torch (the offline acceptance)",
         "tools.gpu.spec_drafter": "torch (spec_accept: it trains and evaluates with the machine's torch)"}
COMMANDS = ["e2e", "pre_gap_check", "verify_cost", "gdn_float32_check", "ddtree_hybrid_kernel_check", "spec_value"]


def bare(*args):
    """The machine's interpreter without site-packages (-S) or PYTHON* settings (-E), from the checkout's root."""
    return subprocess.run([sys.executable, "-S", "-E", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def modules():
    import tools.gpu
    return sorted(m.name for m in pkgutil.walk_packages(tools.gpu.__path__, "tools.gpu.")
                  if not m.name.endswith("__main__"))


def test_the_modules_need_only_the_standard_library():
    names = modules()
    assert "tools.gpu.spec_value.run" in names and "tools.gpu.e2e" in names
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    r = bare("-c", code, *[n for n in names if n not in NEEDS])
    assert r.returncode == 0, r.stderr[-2000:]
    for name in NEEDS:        # each needs what it says, and nothing of this package is missing
        r = bare("-c", code, name)
        assert r.returncode == 1 and "ModuleNotFoundError" in r.stderr, (name, r.stderr[-500:])
        assert any(f"No module named '{m}'" in r.stderr for m in ("sgl_overlay", "torch")), (name, r.stderr[-500:])


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_answers_help_with_the_standard_library(name):
    r = bare("-m", f"tools.gpu.{name}", "--help")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("usage:"), r.stdout[:300]
