"""The debug topic's port to SGLang v0.5.23 (patches/ports/v0.5.23/debug):
the memory sizing ledger written as JSON when SGLO_MEMORY_LEDGER is set.

The port instruments the memory topic's ledger (its patch says ``Requires:
memory``), so its tree is v0.5.23 with the memory port and then the debug
port.  Default tree: that, applied strictly (tests/port_tree.py).  ``--tree
DIR``: any tree holding ``sglang/`` or ``python/sglang/``; ``tools/stack.py
export --topic debug --onto 0.5.23 --check`` runs each ``Evidence:`` test on
v0.5.23 + the memory port (it must fail: no ledger file is written) and with
the debug patch too (it must pass).

The check is tests/memory/test_patches.py's ``check_memory_ledger`` (the pin's
evidence for memory-ledger.patch), on v0.5.23's own sizing through the
harness: a refusal and a start-up each write the file, log each figure at
INFO, and the refusal's remedy lines are the file's remedies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sgl_overlay.harness import source_root

from tests import port_tree
from tests.memory.test_patches import check_memory_ledger

SERIES_DIR = port_tree.PORTS / "debug"
REQUIRES = (port_tree.PORTS / "memory",)
UPSTREAM_TEST = Path("test/registered/unit/model_executor/test_memory_ledger_file.py")


@pytest.fixture(scope="module")
def port(request, tmp_path_factory) -> Path:
    given = request.config.getoption("--tree")
    if given:
        return source_root(given)
    dest = tmp_path_factory.mktemp("debug-port-v0.5.23") / "sglang"
    return source_root(port_tree.build(SERIES_DIR, dest, on=REQUIRES))


def test_ledger_file_written_and_logged(port):
    """v0.5.23 + the memory port keeps its ledger in memory only (the harness
    falls back to it): "no ledger written"; with the debug port the file is
    written on a refusal and on a start-up, and each figure is logged."""
    check_memory_ledger(port)


def test_upstream_unit_test_passes(port):
    """test/registered/unit/model_executor/test_memory_ledger_file.py (added by
    the port, SGLang's test layout) passes on the tree: before the patch the
    file is not there (the export copies nothing for an evidence run)."""
    port_tree.run_upstream_unit_test(port, UPSTREAM_TEST)
