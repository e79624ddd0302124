"""A local git repository whose commits are consecutive real SGLang release
trees: one commit per release on branch ``main``, each holding the
release's ``sglang/`` package as ``python/sglang`` (as upstream's own
repository lays it out), tagged ``v<version>``.

Built straight from the unpacked release trees (``source.release_tree``)
through a scratch index, so nothing is copied: git hashes the files where
they lie.  The repository is cached under the sgl-overlay cache, keyed by
the version list, so the pytest workers and later runs build it once.
"""
import fcntl
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from tools.sglo import gitcmd, source

EXCLUDE = "__pycache__/\n*.pyc\n.sgl-overlay-release\n"


def _commit_release(repo, version, parent, when):
    tree_dir = source.release_tree(version)
    with tempfile.TemporaryDirectory(prefix="sglo-history-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        gitcmd.run(repo, f"--work-tree={tree_dir}", "add", "-A", "--", "sglang", env=env)
        pkg = gitcmd.out(repo, "write-tree", "--prefix=sglang/", env=env)
        env2 = {"GIT_INDEX_FILE": os.path.join(tmp, "index2")}
        gitcmd.run(repo, "read-tree", f"--prefix=python/sglang/", pkg, env=env2)
        root = gitcmd.out(repo, "write-tree", env=env2)
    date = f"2026-01-01T00:00:{when:02d}+00:00"
    args = ["commit-tree", root, "-m", f"sglang {version}\n\nThe published release {version}, unpacked.\n"]
    if parent:
        args += ["-p", parent]
    commit = gitcmd.out(repo, *args, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    gitcmd.run(repo, "tag", f"v{version}", commit)
    return commit


def release_repo(versions, cache=None):
    """Path of the repository (built once) with one commit per version, in order."""
    key = hashlib.sha256(" ".join(versions).encode()).hexdigest()[:12]
    root = source.cache_dir(cache) / "test-history"
    root.mkdir(parents=True, exist_ok=True)
    target = root / key
    with open(root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "READY").exists():
            return target / "repo"
        shutil.rmtree(target, ignore_errors=True)
        repo = target / "repo"
        gitcmd.init(repo)
        (repo / ".git" / "info" / "exclude").write_text(EXCLUDE)
        parent = None
        for n, v in enumerate(versions):
            parent = _commit_release(repo, v, parent, n)
        gitcmd.run(repo, "update-ref", "refs/heads/main", parent)
        gitcmd.run(repo, "symbolic-ref", "HEAD", "refs/heads/main")
        (target / "READY").write_text(" ".join(versions) + "\n")
    return repo
