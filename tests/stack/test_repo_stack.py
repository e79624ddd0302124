"""The repository's own stack: lint-clean, and canonical (re-exporting the
built stack reproduces patches/ modulo noise). CI runs these through the
ordinary test command."""
import subprocess
import sys

from tests.apply.support import ROOT

STACK = ROOT / "tools" / "stack.py"


def test_the_stack_is_lint_clean():
    p = subprocess.run([sys.executable, str(STACK), "lint"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_refresh_check_finds_nothing_to_change(tmp_path):
    p = subprocess.run([sys.executable, str(STACK), "refresh", "--check", "-q"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "nothing to change" in p.stdout
