"""Fixtures for the bisect tests: the history repository of real releases
(built once into the cache) and a tree cache per pytest worker."""
import pytest

from tests.bisect.support import history, make_stack_root


@pytest.fixture(scope="session")
def repo():
    return history()


@pytest.fixture(scope="session")
def trees():
    """Step trees, kept in the cache like the release downloads (each is
    verified against its record on every use; test_bisect_cache.py
    checks a damaged one is rebuilt)."""
    from sgl_overlay import project
    return project.cache_dir() / "bisect-trees-tests"


@pytest.fixture(scope="session")
def stack_root(repo, tmp_path_factory):
    return make_stack_root(tmp_path_factory.mktemp("stack") / "proj", repo)
