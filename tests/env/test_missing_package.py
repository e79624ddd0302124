"""A third-party package missing from the environment stops every tool
that needs it with exit 2, naming the package and the extra to install;
never a traceback, never an 'untestable' verdict on the tree."""
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_overlay import extras
from sgl_overlay.harness import outcome
from sgl_overlay.harness.child import errors

ROOT = Path(__file__).resolve().parents[2]

# An import hook that makes one package look uninstalled, for this
# interpreter and every one it starts (sitecustomize runs at start-up).
BLOCK = """import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {package!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Block())
"""


def run_without(package, tool, *args, tmp_path):
    site = tmp_path / "block"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK.format(package=package))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(site),
           "SGL_OVERLAY_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(ROOT / "tools" / tool), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def assert_names(p, package):
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert f"needs the Python package '{package}'" in p.stderr
    assert "hint: install it: python -m pip install -e '.[harness]'" in p.stderr
    assert "Traceback" not in p.stdout + p.stderr


@pytest.mark.parametrize("package", ["msgspec", "torch"])
def test_regress_names_the_missing_package(package, tmp_path):
    # the tree is never reached: the check runs before any download or child
    p = run_without(package, "regress.py", "--tree", str(tmp_path), "--scenario", "dflash-smoke", tmp_path=tmp_path)
    assert_names(p, package)


def test_bisect_stops_before_any_step(tmp_path):
    p = run_without("numpy", "bisect.py", "--releases", "0.5.11..0.5.16", "--scenario", "zero-requests-dflash",
                    "--fixed", "--log", str(tmp_path / "log.jsonl"), tmp_path=tmp_path)
    assert_names(p, "numpy")
    assert not (tmp_path / "log.jsonl").exists() or "result" not in (tmp_path / "log.jsonl").read_text()


def test_plan_names_the_missing_package(tmp_path):
    model = ROOT / "tests" / "plan" / "data" / "qwen3.6-27b"
    p = run_without("msgspec", "plan.py", str(model), "--gpu", "H200", "--", "--tp-size", "1", tmp_path=tmp_path)
    assert_names(p, "msgspec")


def test_a_module_missing_inside_the_child_is_an_environment_error(tmp_path):
    """Raised inside SGLang's code in the child: described as an environment
    error naming the top-level package, not as an untestable import."""
    try:
        import a_package_that_is_not_installed.sub  # noqa: F401  pyflakes: the import is the test
    except ModuleNotFoundError as e:
        d = errors.describe_exception(e, tmp_path)
    assert (d["kind"], d["package"]) == ("environment", "a_package_that_is_not_installed")


def test_a_missing_name_inside_sglang_stays_the_trees_problem(tmp_path):
    e = ModuleNotFoundError("No module named 'sglang.srt.gone'", name="sglang.srt.gone")
    try:
        raise e
    except ModuleNotFoundError as caught:
        d = errors.describe_exception(caught, tmp_path)
    assert (d["kind"], d["package"]) == ("import", None)
    assert outcome.classify({"completed": False, "error": d}).outcome is outcome.Outcome.UNTESTABLE


def test_every_extra_module_is_declared_in_pyproject():
    import tomllib
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, modules in extras.EXTRAS.items():
        names = {r.split("=")[0].split(">")[0].split("<")[0].strip().lower() for r in declared[extra]}
        assert set(modules) <= names, (extra, modules, names)
