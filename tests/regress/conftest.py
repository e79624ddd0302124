"""Fixtures for the regression-harness tests: release trees come from the cache."""

import os

import pytest

# The CI matrix; SGLO_ALL_RELEASES=1 widens test_matrix.py to every release below.
CI_RELEASES = ["0.5.9", "0.5.11", "0.5.12.post1", "0.5.13", "0.5.14", "0.5.16", "0.5.23"]
ALL_RELEASES = [
    "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12",
    "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
    "0.5.20", "0.5.21", "0.5.22", "0.5.23",
]


def all_releases_requested() -> bool:
    return os.environ.get("SGLO_ALL_RELEASES") == "1"


_trees: dict = {}


@pytest.fixture(scope="session")
def release_tree():
    """Callable: version -> cached, verified directory holding sglang/ (downloaded once)."""
    from sgl_overlay.release_trees import release_tree as fetch

    def get(version: str):
        if version not in _trees:
            _trees[version] = fetch(version)
        return _trees[version]

    return get
