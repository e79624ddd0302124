"""The regression-harness tests' release lists (their trees: tests/conftest.py's release_tree, from the cache)."""

import os

# The CI matrix (the eras' ends, oracle.py, and the pin, v0.5.17, the first of the "padded" era);
# SGLO_ALL_RELEASES=1 widens test_matrix.py to every release below.
CI_RELEASES = ["0.5.9", "0.5.11", "0.5.12.post1", "0.5.13", "0.5.14", "0.5.16", "0.5.17", "0.5.23"]
ALL_RELEASES = [
    "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12",
    "0.5.12.post1", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
    "0.5.20", "0.5.21", "0.5.22", "0.5.23",
]


def all_releases_requested() -> bool:
    return os.environ.get("SGLO_ALL_RELEASES") == "1"


# release_tree (version -> the release unpacked, from the cache) is tests/conftest.py's, shared by
# every folder's release-matrix tests.
