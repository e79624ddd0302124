"""Fixtures for the bisect tests: the history repository of real releases
(built once into the cache) and a tree cache per pytest worker."""
import pytest

from tests.bisect.support import history, make_stack_root


@pytest.fixture(scope="session")
def repo():
    return history()


@pytest.fixture(scope="session")
def trees(tmp_path_factory):
    return tmp_path_factory.mktemp("bisect-trees")


@pytest.fixture(scope="session")
def stack_root(repo, tmp_path_factory):
    return make_stack_root(tmp_path_factory.mktemp("stack") / "proj", repo)
