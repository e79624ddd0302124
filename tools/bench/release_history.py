"""A git history of published releases: one commit per release, the
release's sglang/ as python/sglang, tagged v<version>, built once from the
cached release trees.  Bisect's commit mode and its comparison with
`git bisect run` run on it where upstream's own history is not at hand.

Used by tools/bench/bisect_vs_git.py (its sibling: this folder is that
script's sys.path[0]) and by tests/bisect (loaded by its path,
tests/bisect/support.py); no part of the sgl_overlay library."""
import hashlib
import os
import shutil
import tempfile

from sgl_overlay import gitcmd, locking, release_list, release_trees
from sgl_overlay.artifacts import PACKAGE
from sgl_overlay.project import cache_dir
from sgl_overlay.versions import release as release_number

EXCLUDE = "__pycache__/\n*.pyc\n.sgl-overlay-release\n*.so\n"


def commit_release(repo, version, parent, n):
    tree_dir = release_trees.release_tree(version)
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-history-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "a")}
        gitcmd.run(repo, f"--work-tree={tree_dir}", "add", "-A", "--", PACKAGE, env=env)
        pkg = gitcmd.out(repo, "write-tree", f"--prefix={PACKAGE}/", env=env)
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "b")}
        gitcmd.run(repo, f"--work-tree={tmp}", "read-tree", f"--prefix=python/{PACKAGE}/", pkg, env=env)
        root = gitcmd.out(repo, "write-tree", env=env)
    date = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}+00:00"
    args = ["commit-tree", root, "-m", f"sglang {version}\n\nThe published release {version}, unpacked.\n"]
    commit = gitcmd.out(repo, *args, *(["-p", parent] if parent else []),
                        env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    gitcmd.run(repo, "tag", f"v{version}", commit)
    return commit


def release_history(versions, cache=None):
    """A git repository (built once, cached) with one commit per release in
    ``versions`` order on branch main: the release's sglang/ as
    python/sglang (compiled modules left out, as in upstream's git),
    tagged v<version>.  Git hashes the cached release trees in place."""
    key = hashlib.sha256(" ".join(versions).encode()).hexdigest()[:12]
    root = cache_dir(cache) / "release-history"
    root.mkdir(parents=True, exist_ok=True)
    target = root / key
    with locking.cache_entry(root / f".{key}.lock", f"the release history {key}"):
        if (target / "READY").exists():
            return target / "repo"
        shutil.rmtree(target, ignore_errors=True)
        repo = target / "repo"
        gitcmd.init(repo, bare=True)
        (repo / "info").mkdir(exist_ok=True)
        (repo / "info" / "exclude").write_text(EXCLUDE)
        parent = None
        for n, v in enumerate(versions):
            parent = commit_release(repo, v, parent, n)
        gitcmd.run(repo, "update-ref", "refs/heads/main", parent)
        gitcmd.run(repo, "symbolic-ref", "HEAD", "refs/heads/main")
        (target / "READY").write_text(" ".join(versions) + "\n")
    return repo


def releases_between(old, new):
    lo, hi = release_number(old), release_number(new)
    return [v for v in release_list.list_releases() if lo <= release_number(v) <= hi]


