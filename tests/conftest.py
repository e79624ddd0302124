"""Options and fixtures shared by the test folders.

``pristine_tree``: the pinned release (0.5.12.post1) unpacked, a directory
holding ``sglang/``.  ``patched_tree``: this repository's whole stack built
by tools/apply.py into a temporary directory (holding ``python/sglang``), or
the tree given with ``--tree``.  Every patch's test runs against both: it
must fail on the first and pass on the second.
"""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption(
        "--tree",
        action="store",
        default=None,
        metavar="PATH",
        help="the patched SGLang tree to test (default: the repository's stack "
        "built by tools/apply.py into a temporary directory)",
    )


@pytest.fixture(scope="session")
def pinned_lock():
    from tools.sglo import lock

    return lock.load(ROOT / "upstream.lock")


@pytest.fixture(scope="session")
def pristine_tree(pinned_lock):
    from tools.sglo import source

    return source.release_tree(pinned_lock.version)


@pytest.fixture(scope="session")
def patched_tree(request, pinned_lock, tmp_path_factory):
    given = request.config.getoption("--tree")
    if given:
        return Path(given).resolve()
    from tools.sglo import builder, series

    dest = tmp_path_factory.mktemp("patched") / "sglang"
    builder.build(pinned_lock, series.load(ROOT), dest)
    return dest
