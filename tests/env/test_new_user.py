"""What a new user meets first (issue 43): `sgl-overlay --version`, and a
shim in tools/ run by an interpreter without the package installed."""
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from sgl_overlay import TOOL_VERSION, lock

ROOT = Path(__file__).resolve().parents[2]
SHIMS = ("apply", "bisect", "regress", "plan", "stack", "bundle", "imports")


def sgl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "sgl_overlay", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_version_names_the_package_and_the_pin_of_the_checkout():
    pin = lock.load(ROOT / "upstream.lock")
    p = sgl("--version", cwd=ROOT / "docs")
    assert p.returncode == 0, p.stderr
    assert p.stdout == (f"sgl-overlay {TOOL_VERSION} (checkout {ROOT}: SGLang {pin.tag}, commit {pin.commit[:12]}, "
                        f"upstream.lock)\n")
    # the version the package is installed as (pyproject.toml) is the one the tool says and records
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == TOOL_VERSION


def test_version_outside_a_checkout_still_answers():
    # the system's temporary directory: pytest's tmp_path may lie inside this checkout (build/pytest-tmp)
    with tempfile.TemporaryDirectory() as outside:
        p = sgl("--version", cwd=outside)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"sgl-overlay {TOOL_VERSION} (no checkout here")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A new virtual environment with nothing installed: the interpreter of a
    user who cloned the repository and has not run pip yet."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=300)
    return venv / "bin" / "python"


@pytest.mark.parametrize("shim", SHIMS)
def test_a_shim_without_the_package_says_how_to_install_it(shim, bare_python, tmp_path):
    p = subprocess.run([bare_python, ROOT / "tools" / f"{shim}.py", "--help"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.splitlines() == [
        f"error: tools/{shim}.py needs the sgl_overlay package, which is not installed for {bare_python}",
        f"hint: install it from the checkout: cd {ROOT} && {bare_python} -m pip install -e .  "
        f"(README.md, 'Set up on a fresh machine')"], p.stderr
