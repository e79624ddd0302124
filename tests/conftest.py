"""Options and fixtures shared by the test folders.

``pristine_tree``: the pinned release (upstream.lock's version) unpacked, a
directory holding ``sglang/``.  ``patched_tree``: this repository's whole stack
built by tools/apply.py into a temporary directory (holding ``python/sglang``),
or the tree given with ``--tree``.  Every patch's test runs against both: it
must fail on the first and pass on the second.  ``stack_without(NAME)``: the
pin with the whole series but patch NAME (and the overlay), built once per
name and session, for a patch that builds on earlier ones: there its test
shows the specific reason, where the pin only shows that the earlier patches
are missing (docs/testing.md).

The release matrix (docs/testing.md, "Release matrix"): a test about one
release, not about the pin, names that release and takes its trees from
``release_tree(VERSION)`` (the release unpacked, from the cache) and
``patched_tree_of(VERSION)`` (the stack this repository kept for that
release: the pin's own stack, or an earlier pin's from this repository's
history, ``EARLIER_PINS``).  Such a test runs whatever the pin is.

The tests never touch the user's cache (~/.cache/sgl-overlay): every tool
they run, in this process and in the ones it starts, uses
$SGL_OVERLAY_TEST_CACHE, or build/test-cache in this checkout.  Filled
once by an online run, that cache lets `pytest -m "not network"` run with
no package index at all (docs/testing.md).

The tests are hermetic to SGLang's own settings: every ``SGLANG_*`` (and
deprecated ``SGL_*``) variable of the host is removed before any test runs,
so no test's figures depend on the machine; a test that needs one sets it
itself (``monkeypatch.setenv``).  The header of the run names what was removed.
"""
import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_CACHE_ENV = "SGL_OVERLAY_TEST_CACHE"
_removed: dict = {}


def pytest_configure(config):
    from sgl_overlay import project
    from sgl_overlay.harness.environment import sglang_settings

    # hermetic: the host's SGLang settings reach no test, nor any tool or harness child it starts
    for name in sglang_settings(os.environ):
        _removed[name] = os.environ.pop(name)

    cache = Path(os.environ.get(TEST_CACHE_ENV) or ROOT / "build" / "test-cache").resolve()
    cache.mkdir(parents=True, exist_ok=True)
    os.environ[project.CACHE_ENV] = str(cache)

    # The temporary folders in a root of this checkout's own (the system's temporary folder,
    # sgl-overlay-pytest-<a digest of the checkout's path>), not the user's shared
    # /tmp/pytest-of-USER: pytest keeps the newest pytest-N folders there and removes the rest as
    # sessions end, so a second suite run by the same user at the same time (another checkout)
    # deleted this one's live folders (CI beside four other runs: hundreds of FileNotFoundError).
    # Outside the checkout, so "outside any checkout" stays true of tmp_path.  Read when the first
    # folder is made, after this hook (xdist's workers get theirs under the controller's).
    # --basetemp or PYTEST_DEBUG_TEMPROOT still decide.
    if not config.option.basetemp and "PYTEST_DEBUG_TEMPROOT" not in os.environ:
        digest = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
        temproot = Path(tempfile.gettempdir()) / f"sgl-overlay-pytest-{digest}"
        temproot.mkdir(mode=0o700, exist_ok=True)
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(temproot)


def pytest_report_header(config):
    if _removed:
        return "SGLang settings of the host, removed for the tests: " + ", ".join(_removed)


def pytest_addoption(parser):
    parser.addoption(
        "--tree",
        action="store",
        default=None,
        metavar="PATH",
        help="the patched SGLang tree to test (default: the repository's stack "
        "built by tools/apply.py into a temporary directory)",
    )


def shared_tree(tmp_path_factory, key, make):
    """The tree ``make(dest)`` builds, built once per test run and shared by its xdist workers: in
    the run's own temporary folder (the controller's, which each worker's lies in), under a lock
    that the first worker holds while it builds and the others wait on.  A build per worker cost
    one more of each patched tree (about 10 s idle, 40 s on a loaded 2-core machine, eight trees).
    Never shared between runs: a run's trees are its own stack's."""
    from sgl_overlay import locking

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-trees" / key
    folder.mkdir(parents=True, exist_ok=True)
    with locking.hold(folder / ".lock", f"the test tree {key}", wait=None):
        if not (folder / "DONE").exists():
            make(folder / "sglang")
            (folder / "DONE").write_text("")
    return folder / "sglang"


@pytest.fixture(scope="session")
def pinned_lock():
    from sgl_overlay import lock

    return lock.load(ROOT / "upstream.lock")


# The releases this repository pinned before upstream.lock's, each with the last commit of its
# first-parent history whose upstream.lock named that release: that commit's upstream.lock, patches/
# and overlay/ are the stack the GPU records of those days ran (and the one that commit's own tests
# held equal to them).  v0.5.12.post1: pinned from the start until the move to v0.5.17 (issue #25);
# ad8bf30 is the last commit before ef8475e made v0.5.17 the pin for good.
EARLIER_PINS = {"0.5.12.post1": "ad8bf30d0163dd9e86d729d66c0a8780f0599779"}


def earlier_pin_root(version, dest):
    """upstream.lock, patches/ and overlay/ of this repository at EARLIER_PINS[version], unpacked into
    ``dest`` (a root series.load and lock.load read).  A release this repository never pinned, or a
    clone without that commit (shallow), fails the test that asked: its record cannot be checked."""
    commit = EARLIER_PINS.get(version)
    if commit is None:
        pytest.fail(f"no stack of this repository is known for v{version} (tests/conftest.py EARLIER_PINS "
                    f"names {sorted(EARLIER_PINS)})", pytrace=False)
    p = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "upstream.lock", "patches",
                        "overlay"], capture_output=True)
    if p.returncode != 0:
        pytest.fail(f"the stack of v{version} is commit {commit[:12]} of this repository, which this clone "
                    f"cannot read ({p.stderr.decode(errors='replace').strip()}); a full clone has it",
                    pytrace=False)
    with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):     # Python 3.11.4+
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)                # git archive of our own commit: no links out, no absolute names
    return dest


@pytest.fixture(scope="session")
def release_tree():
    """Callable: version -> that release unpacked (cached, verified; a directory holding sglang/)."""
    from sgl_overlay import release_trees

    trees = {}

    def get(version):
        if version not in trees:
            trees[version] = release_trees.release_tree(version)
        return trees[version]

    return get


@pytest.fixture(scope="session")
def patched_tree_of(pinned_lock, request, tmp_path_factory):
    """Callable: version -> the patched tree (holding python/sglang) of the stack this repository kept
    for that release: ``patched_tree`` for the pin; for an earlier pin, that pin's upstream.lock,
    patches/ and overlay/ from this repository's history (EARLIER_PINS) through today's real builder,
    built once per session.  A GPU record taken on that release is checked against the stack that ran
    there, whatever the pin is now."""
    from sgl_overlay import builder, lock, series

    built = {}

    def get(version):
        if version == pinned_lock.version:
            return request.getfixturevalue("patched_tree")
        if version not in built:
            def make(dest):
                root = earlier_pin_root(version, dest.parent / "root")
                old_lock = lock.load(root / "upstream.lock")
                assert old_lock.version == version, (EARLIER_PINS[version], old_lock.version)
                builder.build(old_lock, series.load(root), dest)

            built[version] = shared_tree(tmp_path_factory, f"stack-v{version}", make)
        return built[version]

    return get


@pytest.fixture(scope="session")
def pristine_tree(pinned_lock):
    from sgl_overlay import release_trees

    return release_trees.release_tree(pinned_lock.version)


@pytest.fixture(scope="session")
def patched_tree(request, pinned_lock, tmp_path_factory):
    given = request.config.getoption("--tree")
    if given:
        return Path(given).resolve()
    from sgl_overlay import builder, series

    return shared_tree(tmp_path_factory, "patched", lambda dest: builder.build(pinned_lock, series.load(ROOT), dest))


def build_without(lock, root, name, dest, *more):
    """The real builder's tree of ``root``'s series less patch ``name`` (and its
    overlay), and less the patches ``more`` (later ones that need its lines), at ``dest``.
    A remaining series that does not apply fails the test that asked, with the builder's
    diagnosis: that test's evidence is gone, which a skip would hide."""
    from sgl_overlay import builder, series

    from sgl_overlay.errors import ApplyError

    stack = series.load(root)
    for n in (name, *more):
        stack = series.without(stack, n)
    try:
        builder.build(lock, stack, dest)
    except ApplyError as e:
        pytest.fail(f"the series without {name} does not apply to the pin, so the test of {name} "
                    f"cannot show its reason there:\n{e}\n(a later patch needs {name}: test its reason "
                    "another way, or make the later patch independent of it)", pytrace=False)
    return dest


@pytest.fixture(scope="session")
def stack_without(pinned_lock, tmp_path_factory):
    """``stack_without("x.patch", *later)``: the tree (holding ``python/sglang``) of the pin
    and the series less x.patch and the ``later`` patches that need its lines (build_without),
    built once per set and session."""
    built = {}

    def build(name, *more):
        key = (name, *more)
        if key not in built:
            folder = "without-" + "-".join(Path(n).stem for n in key)
            try:
                built[key] = shared_tree(tmp_path_factory, folder,
                                         lambda dest: build_without(pinned_lock, ROOT, name, dest, *more))
            except pytest.fail.Exception as e:
                built[key] = e
        if isinstance(built[key], BaseException):
            raise built[key]
        return built[key]

    return build
