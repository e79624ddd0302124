"""Ctrl-C at any moment of tools/apply.py is `interrupted`, exit 130
(docs/exit-codes.md): also in its first seconds, while the release is
unpacked into the git index and a `git update-index` helper, stopped by
the same Ctrl-C, leaves a broken pipe behind (issue 43: that was
`error: unexpected BrokenPipeError ... please report it`, exit 2)."""
import subprocess
from pathlib import Path

import pytest

from tests.apply.support import ROOT, Project
from tests.terminal import AT_A_TERMINAL

DRIVER = Path(__file__).with_name("interrupt_at.py")


@pytest.mark.parametrize("order", ["helper-first", "helper-only"])
@pytest.mark.parametrize("nth", [1, 200])
def test_ctrl_c_while_unpacking_is_interrupted(order, nth, tmp_path):
    project = Project(tmp_path / "proj", (ROOT / "upstream.lock").read_text())
    # started as from a terminal (SIGINT at its default, for it and for git): tests/terminal.py says why
    p = subprocess.run([*AT_A_TERMINAL, "-P", str(DRIVER), order, str(nth), "apply", "--root", str(project.root),
                        "--out", str(project.out), "-q"], capture_output=True, text=True, timeout=600)
    assert (p.returncode, p.stderr.strip()) == (130, "interrupted"), (p.returncode, p.stderr[-3000:])
    assert not project.out.exists()
    assert not list(project.out.parent.glob(".sglang.tmp-*"))
