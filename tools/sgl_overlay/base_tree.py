"""The base tree of a build: a git repository whose branch ``upstream`` holds
SGLang's ``python/sglang``, proven to be the pinned upstream.

Two sources give the same tree:

* the release artifact (default): the lock's wheel from the artifact store
  (artifacts.py: checked against the lock's sha256), unpacked with every
  member checked (archive.py), reconciled with the git tree as the lock's
  ``[artifact.reconcile]`` lists, and proven by the mode-normalized tree id
  (``tree_normalized``);
* git (``--repo URL_OR_PATH``): the commit itself, fetched through a cached
  bare clone (clones.py); its ``python/sglang`` tree id must equal the
  lock's exactly.

``base_from_release`` makes a like base from any published release (no lock
to prove it against: bisect, ``stack.py --onto``), and ``prove_artifact``
proves another of the release's wheels (another Python's) against the lock.
"""
import enum
import os
import tempfile
from pathlib import Path

from . import archive, artifacts, clones, gitcmd
from .errors import IntegrityError, UsageError

BASE_MESSAGE = """upstream: sglang {version} ({commit:.10})

{subdir} of {repo} at {commit} (tag {tag}),
from {origin}.
python/sglang tree: {exact}
"""


class Source(enum.StrEnum):
    """Where a base tree came from: the manifest's ``source.source``."""
    ARTIFACT = "artifact"        # the lock's release artifact
    RELEASE = "release"          # another published release (bisect, roll)
    GIT = "git"                  # the upstream repository at the lock's commit

    @classmethod
    def of_build(cls, repo):
        """A build's source: git with ``--repo``, else the lock's artifact."""
        return cls.GIT if repo else cls.ARTIFACT


def _quiet(progress):
    return progress or (lambda msg: None)


def _commit_base(repo_dir, message, date):
    root_tree = gitcmd.out(repo_dir, "write-tree")
    stamp = f"{date}T00:00:00+00:00"
    commit = gitcmd.out(repo_dir, "commit-tree", root_tree, "-m", message,
                        env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    gitcmd.run(repo_dir, "update-ref", "refs/heads/upstream", commit)
    return commit


def _reconciled(lock, artifact, repo_dir):
    """Unpack ``artifact`` (one of the lock's release's wheels) into
    ``repo_dir`` and its index, reconciled as the lock lists; ``(tree,
    normalized tree)`` of its subdir once the normalized id equals the
    lock's, IntegrityError otherwise."""
    where = f"artifact {Path(artifact).name}"
    seen = archive.unpack_to_index(artifact, lock.artifact_root, repo_dir, lock.subdir, lock.generated,
                                   lock.compiled, lock.symlinks, lock.executable)
    for what, listed in (("generated file", lock.generated), ("symlink", lock.symlinks), ("executable", lock.executable)):
        missing = sorted(set(listed) - seen)
        if missing:
            raise IntegrityError(f"{where}: {what} {missing[0]!r} listed in the lock is not in the artifact",
                                 hint="the artifact does not match the lock's [artifact.reconcile] lists; "
                                      "do not build from it")
    exact = gitcmd.out(repo_dir, "write-tree", f"--prefix={lock.subdir}/")
    shipped = [d for d in lock.excluded if gitcmd.run(repo_dir, "rev-parse", "--verify", "--quiet",
                                                      f"{exact}:{d}", check=False).returncode == 0]
    if shipped:
        raise IntegrityError(f"{where}: {lock.subdir}/{shipped[0]} is in the artifact, but the lock lists it "
                             "as a directory the release does not ship (artifact.reconcile.excluded)",
                             hint="the artifact does not match the lock's [artifact.reconcile] lists; "
                                  "do not build from it")
    normalized = normalized_tree(repo_dir, exact)
    if normalized != lock.tree_normalized:
        raise IntegrityError(
            f"{where}: the mode-normalized tree of {lock.subdir} is {normalized}, the lock says {lock.tree_normalized}",
            hint="the artifact's contents differ from the pinned commit beyond the lock's reconcile list; "
                 "do not build from it")
    return exact, normalized


def base_from_artifact(lock, repo_dir, cache=None, progress=None):
    """Initialise ``repo_dir`` as a git repo whose one commit (branch
    ``upstream``) holds the lock's python/sglang from the release artifact,
    reconciled as the lock lists and proven by the normalized tree id.
    Returns facts for the build manifest."""
    artifact = artifacts.pinned(lock, cache, progress)
    _quiet(progress)(f"unpacking {artifact.name}")
    exact, normalized = _reconciled(lock, artifact.path, repo_dir)
    msg = BASE_MESSAGE.format(origin=f"release artifact {lock.artifact_filename} (sha256 {lock.artifact_sha256})",
                              exact=exact, **lock.as_dict())
    commit = _commit_base(repo_dir, msg, lock.date)
    return {"source": Source.ARTIFACT, "artifact": lock.artifact_filename, "artifact_sha256": lock.artifact_sha256,
            "base_commit": commit, "tree": exact, "tree_normalized": normalized}


def prove_artifact(lock, artifact, progress=None):
    """Prove that ``artifact`` (any of the release's wheels) holds the lock's
    ``python/sglang``: unpacked into a scratch repository, reconciled as the
    lock's ``[artifact.reconcile]`` lists (compiled modules, which differ per
    Python, left out), its mode-normalized tree id must equal
    ``tree_normalized``. Returns that id; IntegrityError otherwise."""
    _quiet(progress)(f"proving {Path(artifact).name} against the lock's tree")
    with tempfile.TemporaryDirectory(prefix="sglo-prove-") as tmp:
        return _reconciled(lock, artifact, tmp)[1]


def base_from_release(version, repo_dir, subdir="python/sglang", symlinks=None, cache=None, progress=None):
    """A base like base_from_artifact's for any published release, with no
    lock to prove it against: generated files and compiled modules left out,
    ``symlinks`` (e.g. the current lock's) made where those paths exist,
    every file mode 100644. Its tree id is therefore the release's
    normalized tree id, comparable with a git tag's."""
    artifact = artifacts.release(version, cache, progress)
    _quiet(progress)(f"unpacking {artifact.name}")
    names = {rel for rel, _ in archive.iter_members(artifact.path, artifacts.PACKAGE)}
    links = {k: v for k, v in (symlinks or {}).items() if k in names}
    archive.unpack_to_index(artifact.path, artifacts.PACKAGE, repo_dir, subdir, ("_version.py",), ("*.so",), links)
    tree = gitcmd.out(repo_dir, "write-tree", f"--prefix={subdir}/")
    msg = f"upstream: sglang {version} (release artifact)\n\n{subdir} from {artifact.name}\n" \
          f"(sha256 {artifact.sha256}), file modes normalized.\n"
    commit = _commit_base(repo_dir, msg, "2000-01-01")
    return {"source": Source.RELEASE, "version": version, "artifact": artifact.name, "base_commit": commit,
            "tree_normalized": tree}


def base_from_git(lock, repo_dir, url, cache=None, progress=None, commit=None):
    """Initialise ``repo_dir`` with the upstream commit itself (shallow) on
    branch ``upstream``; its python/sglang tree must equal the lock's."""
    say = _quiet(progress)
    commit = commit or lock.commit
    bare, key = clones.bare_clone(url, cache, progress)
    has = gitcmd.run(bare, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0
    if not has:
        say(f"fetching {commit[:12]} from {url}")
        with clones.clone_lock(bare, say):
            try:
                gitcmd.run(bare, "fetch", "--quiet", key, commit)
            except gitcmd.GitFailed:
                try:
                    gitcmd.run(bare, "fetch", "--quiet", "--tags", key, "+refs/heads/*:refs/heads/*")
                except gitcmd.GitFailed as e:
                    raise UsageError(f"could not fetch from {url}: {e.stderr.strip()}",
                                     hint="check the URL or path given with --repo")
        if gitcmd.run(bare, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
            raise IntegrityError(f"{url} does not have commit {commit}",
                                 hint="the repository is not SGLang, or the lock's commit is wrong")
    tree = gitcmd.run(bare, "rev-parse", f"{commit}:{lock.subdir}", check=False).stdout.strip()
    if tree != lock.tree:
        raise IntegrityError(f"{url} at {commit[:12]}: {lock.subdir} has tree {tree or '(missing)'}, "
                             f"the lock says {lock.tree}",
                             hint="this repository's commit does not hold the pinned upstream tree")
    gitcmd.init(repo_dir)
    upload = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
    gitcmd.run(repo_dir, "fetch", "--quiet", "--depth=1", f"--upload-pack={upload}",
               "file://" + str(bare), commit)
    gitcmd.run(repo_dir, "update-ref", "refs/heads/upstream", commit)
    say(f"checking out {commit[:12]}")
    gitcmd.run(repo_dir, "reset", "--quiet", "--hard", commit)
    normalized = normalized_tree(repo_dir, tree, lock.excluded)
    if normalized != lock.tree_normalized:
        raise IntegrityError(f"{url}: normalized tree {normalized} does not match the lock's {lock.tree_normalized}",
                             hint="the lock's two tree ids disagree with each other; fix the lock")
    return {"source": Source.GIT, "repo": url, "base_commit": commit, "tree": tree, "tree_normalized": normalized}


def normalized_tree(repo_dir, tree, excluded=()):
    """The id of ``tree`` with every file mode set to 100644
    (symlinks and submodules kept), computed through a scratch index."""
    return tree_without(repo_dir, tree, excluded, normalize=True)


def tree_without(repo_dir, tree, excluded=(), normalize=False):
    """The id of ``tree`` less the directories ``excluded`` (paths relative to
    it: a lock's artifact.reconcile.excluded), every file mode 100644 with
    ``normalize``; computed through a scratch index."""
    prefixes = tuple(d.rstrip("/").encode() + b"/" for d in excluded)
    with tempfile.TemporaryDirectory(prefix="sglo-index-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        ls = gitcmd.run(repo_dir, "ls-tree", "-r", "-z", "--full-tree", tree, binary=True).stdout
        entries = []
        for rec in ls.split(b"\0"):
            if not rec:
                continue
            meta, path = rec.split(b"\t", 1)
            if prefixes and path.startswith(prefixes):
                continue
            mode, kind, sha = meta.split()
            if normalize and mode == b"100755":
                mode = b"100644"
            entries.append(mode + b" " + sha + b"\t" + path)
        gitcmd.run(repo_dir, "update-index", "-z", "--index-info", input=b"\0".join(entries) + b"\0",
                   binary=True, env=env)
        return gitcmd.out(repo_dir, "write-tree", env=env)
