"""Fixtures for tools/apply.py tests (helpers in support.py)."""
import pytest

from tests.apply.support import ROOT, PatchMaker, Project
from sgl_overlay import lock as lockmod
from sgl_overlay.base_tree import base_from_artifact


@pytest.fixture(scope="session")
def lock():
    return lockmod.load(ROOT / "upstream.lock")


@pytest.fixture(scope="session")
def base_tree(lock, tmp_path_factory):
    d = tmp_path_factory.mktemp("base") / "tree"
    base_from_artifact(lock, d)
    return d


@pytest.fixture
def patches(base_tree, tmp_path):
    return PatchMaker(base_tree, tmp_path / "scratch")


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path / "proj", (ROOT / "upstream.lock").read_text())
