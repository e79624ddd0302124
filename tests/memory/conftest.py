"""Trees for the memory tests: the pinned release and the repository's stack."""

from pathlib import Path

import pytest

from sgl_overlay.harness import source_root

from tests.memory import reports


@pytest.fixture(scope="session", autouse=True)
def _shared_report_cache(tmp_path_factory):
    # The parent of the per-worker base temp directory is shared by xdist workers.
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    reports.CACHE_DIR = shared / "memory-reports"
    reports.CACHE_DIR.mkdir(exist_ok=True)


@pytest.fixture(scope="session")
def pristine(pristine_tree) -> Path:
    root = source_root(pristine_tree)
    reports.LABELS[root] = "pristine"
    return root


@pytest.fixture(scope="session")
def patched(patched_tree) -> Path:
    root = source_root(patched_tree)
    reports.LABELS[root] = "patched"
    return root
