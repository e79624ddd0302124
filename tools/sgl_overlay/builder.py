"""The tree builder: verified upstream base + patch series + overlay ->
a patched SGLang tree (a git repo: branch ``upstream``, one commit per
patch, the overlay commit, ``HEAD`` on branch ``patched``), built beside
the destination and swapped into place atomically, with a build manifest.
"""
import ctypes
import dataclasses
import difflib
import enum
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from . import TOOL_VERSION, base_tree, gitcmd, locking
from .errors import ApplyError, UsageError
from .paths import inside

MANIFEST = ".sgl-overlay-build.json"
TMP_MARK = locking.MARK


# --------------------------------------------------------------------------
# results (their JSON form: to_json, the --json output of tools/apply.py, docs/apply.md)

class PatchStatus(enum.StrEnum):
    APPLIED = "applied"
    FAILED = "failed"


class OverlayStatus(enum.StrEnum):
    NONE = "none"            # the stack has no overlay
    APPLIED = "applied"
    FAILED = "failed"


class BuildStatus(enum.StrEnum):
    BUILT = "built"
    UP_TO_DATE = "up-to-date"


@dataclasses.dataclass(frozen=True)
class PatchResult:
    patch: str
    index: int
    status: PatchStatus
    failure: dict | None = None      # diagnose()'s report when it failed

    def to_json(self):
        return {"patch": self.patch, "index": self.index, "status": str(self.status),
                **({"failure": self.failure} if self.failure else {})}


@dataclasses.dataclass(frozen=True)
class OverlayResult:
    status: OverlayStatus
    files: tuple = ()
    error: str | None = None
    hint: str | None = None

    def to_json(self):
        d = {"status": str(self.status)}
        if self.status is OverlayStatus.APPLIED:
            d["files"] = list(self.files)
        if self.status is OverlayStatus.FAILED:
            d.update(error=self.error, hint=self.hint)
        return d


@dataclasses.dataclass(frozen=True)
class BuildResult:
    status: BuildStatus
    dest: Path
    manifest: dict
    patches: tuple = ()              # PatchResults of a build (none when up to date)

    def to_json(self):
        return {"status": str(self.status), "dest": str(self.dest), "manifest": self.manifest,
                **({"patches": [r.to_json() for r in self.patches]} if self.status is BuildStatus.BUILT else {})}


@dataclasses.dataclass(frozen=True)
class CheckResult:
    base_commit: str
    tree: str
    stack_digest: str
    patches: tuple                   # PatchResults, every patch tried
    overlay: OverlayResult

    @property
    def ok(self):
        return all(r.status is PatchStatus.APPLIED for r in self.patches) and \
            self.overlay.status is not OverlayStatus.FAILED

    def to_json(self):
        return {"status": "ok" if self.ok else "failed", "base_commit": self.base_commit, "tree": self.tree,
                "stack_digest": self.stack_digest, "patches": [r.to_json() for r in self.patches],
                "overlay": self.overlay.to_json()}


# --------------------------------------------------------------------------
# the manifest

def manifest_data(lock, stack, base, head):
    return {
        "tool": "sgl-overlay", "tool_version": TOOL_VERSION,
        "lock": {"version": lock.version, **lock.digest_fields()},
        "source": {k: v for k, v in base.items() if k in ("source", "repo", "artifact")},
        "base_commit": base["base_commit"], "tree": base["tree"], "tree_normalized": base["tree_normalized"],
        "stack_digest": stack.digest,
        "patches": [p.name for p in stack.patches],
        "overlay": [o.rel for o in stack.overlay],
        "head": head,
    }


def read_manifest(dest):
    try:
        data = json.loads((Path(dest) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("tool") == "sgl-overlay" else None


def _same_build(old, lock, stack, source_kind, repo):
    return (old.get("tool_version") == TOOL_VERSION
            and old.get("lock") == {"version": lock.version, **lock.digest_fields()}
            and old.get("stack_digest") == stack.digest
            and old.get("source", {}).get("source") == source_kind
            and (source_kind is not base_tree.Source.GIT or old.get("source", {}).get("repo") == repo))


def _local_changes(dest):
    st = gitcmd.run(dest, "status", "--porcelain", "--untracked-files=normal", check=False)
    if st.returncode != 0:
        return ["(git status failed: the tree is damaged)"]
    return [l[3:] for l in st.stdout.splitlines() if l[3:] != MANIFEST]


# --------------------------------------------------------------------------
# applying the series

def _nearest(file_lines, expected):
    """The window of ``file_lines`` most like ``expected``: (line, ratio)."""
    n = len(expected)
    if not n or not file_lines:
        return None, 0.0
    best, best_at = -1.0, 0
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2(expected)
    for i in range(0, max(1, len(file_lines) - n + 1)):
        sm.set_seq1(file_lines[i:i + n])
        if sm.real_quick_ratio() <= best or sm.quick_ratio() <= best:
            continue
        r = sm.ratio()
        if r > best:
            best, best_at = r, i
    return best_at + 1, best


def diagnose(repo_dir, patch, total):
    """Why ``patch`` does not apply to the tree in ``repo_dir``: the file
    and hunk, the context not found, the nearest place it resembles, and
    whether the patch applies in reverse (already upstream)."""
    p = gitcmd.run(repo_dir, "apply", "--check", "--verbose", str(patch.path), check=False)
    report = {"patch": patch.name, "index": patch.index, "total": total, "subject": patch.subject,
              "git": p.stderr.strip()}
    reverse = gitcmd.run(repo_dir, "apply", "--check", "--reverse", str(patch.path), check=False)
    report["applies_in_reverse"] = reverse.returncode == 0
    m = re.search(r"^error: patch failed: (.+):(\d+)$", p.stderr, re.M)
    missing = re.search(r"^error: (.+): (No such file or directory|does not exist in index)$", p.stderr, re.M)
    exists = re.search(r"^error: (.+): already exists in (working directory|index)$", p.stderr, re.M)
    if m:
        path, line = m.group(1), int(m.group(2))
        report["file"] = path
        pf = next((f for f in patch.patchset if f.path == path), None)
        hunk = next((h for h in (pf or []) if h.source_start == line), None)
        if hunk is not None:
            expected = [l.value.rstrip("\n") for l in hunk if l.is_context or l.is_removed]
            report["hunk"] = str(hunk).splitlines()[0]
            report["expected"] = expected
            try:
                lines = (Path(repo_dir) / path).read_text(errors="replace").splitlines()
            except OSError:
                lines = []
            at, ratio = _nearest(lines, expected)
            if at:
                found = lines[at - 1:at - 1 + len(expected)]
                report["nearest"] = {"line": at, "similarity": round(ratio, 3), "text": found,
                                     "diff": list(difflib.unified_diff(expected, found, "patch expects",
                                                                       f"{path}:{at}", n=0, lineterm=""))[2:]}
    elif missing:
        report["file"] = missing.group(1)
        report["reason"] = "the file does not exist in the tree"
    elif exists:
        report["file"] = exists.group(1)
        report["reason"] = "the patch creates a file that already exists"
    return report


def format_failure(r):
    lines = [f"patch {r['index']}/{r['total']} {r['patch']} ({r['subject']!r}) does not apply"]
    if r.get("file"):
        lines.append(f"  file: {r['file']}")
    if r.get("reason"):
        lines.append(f"  reason: {r['reason']}")
    if r.get("hunk"):
        lines.append(f"  hunk: {r['hunk']}")
        lines.append("  context not found:")
        lines += [f"    | {l}" for l in r["expected"]]
    if r.get("nearest"):
        n = r["nearest"]
        lines.append(f"  nearest place: {r['file']}:{n['line']} (similarity {n['similarity']:.0%}), differing:")
        lines += [f"    {l}" for l in n["diff"]] or ["    (identical text: whitespace or line ends differ)"]
    if r.get("applies_in_reverse"):
        lines.append("  the patch applies in reverse: its change is already upstream; drop it from the series")
    if not r.get("file") and r.get("git"):
        lines += [f"  git: {l}" for l in r["git"].splitlines()]
    return "\n".join(lines)


def apply_patch(repo_dir, patch, total, three_way=False):
    """Commit ``patch`` with git am (strict unless three_way); on failure
    abort and return the diagnosis, else None."""
    p = gitcmd.am(repo_dir, patch.path, "--3way" if three_way else "--no-3way")
    if p.returncode == 0:
        return None
    gitcmd.am_abort(repo_dir)
    report = diagnose(repo_dir, patch, total)
    if three_way:
        report["git_am"] = p.stderr.strip() or p.stdout.strip()
    return report


def apply_overlay(repo_dir, lock, stack):
    """Lay overlay/ into the tree and commit it (if there is anything).
    Stale or unrecorded replacements of upstream files fail (exit 1)."""
    if not stack.overlay:
        return None
    for o in stack.overlay:
        upstream_blob = gitcmd.run(repo_dir, "rev-parse", "--verify", "--quiet", f"upstream:{o.rel}",
                                   check=False).stdout.strip()
        if upstream_blob and o.replaces is None:
            raise ApplyError(f"overlay/{o.rel} replaces an upstream file, and overlay/overlay.toml does not record it",
                             hint=f"if replacing it is intended, add '\"{o.rel}\" = \"{upstream_blob}\"' "
                                  "under [replaces] in overlay/overlay.toml; else move the file")
        if o.replaces is not None and upstream_blob != o.replaces:
            raise ApplyError(f"overlay/{o.rel} is stale: it replaces upstream blob {o.replaces[:12]}, "
                             f"but upstream now has {upstream_blob[:12] if upstream_blob else 'no such file'}",
                             hint="merge upstream's change into the overlay file, then record the new blob "
                                  "in overlay/overlay.toml")
        target = inside(repo_dir, o.rel, "overlay", f"overlay/{o.rel}")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        shutil.copyfile(o.path, target)
        target.chmod(0o755 if o.executable else 0o644)
    gitcmd.run(repo_dir, "add", "--", *[o.rel for o in stack.overlay])
    date = f"{lock.date}T00:00:00+00:00"
    msg = (f"overlay: {len(stack.overlay)} file(s) from overlay/\n\n"
           + "".join(f"{'replaces' if o.replaces else 'adds'} {o.rel}\n" for o in stack.overlay))
    gitcmd.run(repo_dir, "commit", "--quiet", "--no-verify", "-m", msg,
               env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return gitcmd.head(repo_dir)


def prepare_base(lock, repo_dir, repo, cache, progress):
    """The verified upstream base on branch ``upstream``, HEAD on a new
    branch ``patched`` that the series then advances."""
    if repo:
        base = base_tree.base_from_git(lock, repo_dir, repo, cache, progress)
    else:
        base = base_tree.base_from_artifact(lock, repo_dir, cache, progress)
    gitcmd.run(repo_dir, "checkout", "--quiet", "-b", "patched")
    return base


def apply_all(stack, repo_dir, three_way, progress, keep_going):
    say = progress or (lambda m: None)
    total = len(stack.patches)
    results = []
    for p in stack.patches:
        say(f"applying patch {p.index}/{total} {p.name}")
        failure = apply_patch(repo_dir, p, total, three_way)
        if not failure:
            _check_symlinks(repo_dir, p)
        results.append(PatchResult(p.name, p.index, PatchStatus.FAILED if failure else PatchStatus.APPLIED, failure))
        if failure and not keep_going:
            raise ApplyError(format_failure(failure),
                             details={"failure": failure, "patches": [r.to_json() for r in results]},
                             hint="refresh the patch against the pinned tree (tools/apply.py --check shows all "
                                  "failures), or drop it if it is already upstream")
    return tuple(results)


def _check_symlinks(repo_dir, patch):
    """Every symlink among the files ``patch`` touched must resolve inside
    the tree (through any other symlinks), else the input is refused."""
    root = Path(repo_dir).resolve()
    for rel in patch.files:
        link = Path(repo_dir) / rel
        if not link.is_symlink():
            continue
        resolved = Path(os.path.realpath(link))
        if resolved != root and root not in resolved.parents:
            raise UsageError(f"patches/{patch.name}: symlink {rel!r} -> {os.readlink(link)!r} "
                             "resolves outside the tree",
                             hint="a symlink a patch creates must resolve inside the tree")


# --------------------------------------------------------------------------
# build, check

def _exchange(a, b):
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False
    where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    rc = fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    return rc == 0


def swap_into_place(new, dest, trash):
    """Put directory ``new`` at ``dest``: one rename exchange where the
    system has it (the old tree lands at ``new``), else the old tree is
    renamed to ``trash`` first.  Returns where the old tree now is."""
    if not dest.exists():
        os.rename(new, dest)
        return None
    if _exchange(new, dest):
        return new
    os.rename(dest, trash)
    os.rename(new, dest)
    return trash


def _clean_leftovers(dest):
    """Scratch directories of builds whose process died (their marker lock
    is free); a live build's scratch directory is never touched."""
    return locking.clean_scratch(dest.parent, f".{dest.name}.tmp-*")


def _up_to_date(dest, lock, stack, source_kind, repo, force):
    """The old build's manifest if ``dest`` is this very build and clean;
    None if it must be (re)built; UsageError if it may not be replaced."""
    if not (dest.exists() or dest.is_symlink()):
        return None
    old = read_manifest(dest) if dest.is_dir() and not dest.is_symlink() else None
    if old is None:
        raise UsageError(f"{dest} exists and was not made by this tool (no {MANIFEST})",
                         hint="choose another --out, or move that directory away yourself")
    changes = _local_changes(dest)
    if _same_build(old, lock, stack, source_kind, repo) and not changes and \
            gitcmd.run(dest, "rev-parse", "HEAD", check=False).stdout.strip() == old.get("head"):
        return old
    if changes and not force:
        raise UsageError(f"{dest} has local changes in {len(changes)} file(s) (first: {changes[0]}) "
                         "that a rebuild would discard",
                         hint="save them as a patch (git -C DEST format-patch patched..) or pass --force")
    return None


def lock_dest(dest, wait=0, progress=None):
    """The destination's lock (``.NAME.lock`` beside it): one writer at a
    time.  wait=0 refuses at once naming the holder's pid (exit 2)."""
    dest = Path(dest).absolute()
    return locking.hold(locking.dest_lock_path(dest), f"the build of {dest}", wait=wait, progress=progress,
                        hint=f"another tools/apply.py (or stack.py) is writing {dest}; wait for it, or pass "
                             "--wait SECONDS to queue behind it (a lock whose process died is free again by itself)")


def build(lock, stack, dest, repo=None, cache=None, three_way=False, force=False, progress=None, wait=0,
          locked=True):
    """Build the patched tree at ``dest``: a BuildResult, built or up to date.  The destination's lock is held
    throughout (``wait``: see lock_dest); ``locked=False`` only for the
    benchmark that measures what the lock costs."""
    dest = Path(dest).absolute()
    if not locked:
        return _build(lock, stack, dest, repo, cache, three_way, force, progress)
    try:
        held = lock_dest(dest, wait, progress)
    except locking.LockUnavailable:
        # a destination we may not write: fine if it is already this build
        old = _up_to_date(dest, lock, stack, base_tree.Source.of_build(repo), repo, force)
        if old is not None:
            return BuildResult(BuildStatus.UP_TO_DATE, dest, old)
        raise
    with held:
        return _build(lock, stack, dest, repo, cache, three_way, force, progress)


def _build(lock, stack, dest, repo, cache, three_way, force, progress):
    say = progress or (lambda m: None)
    source_kind = base_tree.Source.of_build(repo)
    old = _up_to_date(dest, lock, stack, source_kind, repo, force)
    if dest.parent.is_dir():
        _clean_leftovers(dest)                 # e.g. a run killed after its swap left its scratch folder
    if old is not None:
        return BuildResult(BuildStatus.UP_TO_DATE, dest, old)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp, mark = locking.scratch(dest.parent, f".{dest.name}.tmp-")
    try:
        repo_dir = tmp / "tree"
        base = prepare_base(lock, repo_dir, repo, cache, progress)
        results = apply_all(stack, repo_dir, three_way, progress, keep_going=False)
        if stack.overlay:
            say(f"laying {len(stack.overlay)} overlay file(s)")
        apply_overlay(repo_dir, lock, stack)
        head = gitcmd.head(repo_dir)
        data = manifest_data(lock, stack, base, head)
        (repo_dir / MANIFEST).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        with open(repo_dir / ".git" / "info" / "exclude", "a") as f:
            f.write(f"/{MANIFEST}\n")
        swap_into_place(repo_dir, dest, tmp / "old")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        mark.release()
    return BuildResult(BuildStatus.BUILT, dest, data, results)


def check(lock, stack, repo=None, cache=None, three_way=False, progress=None):
    """Apply the whole series cumulatively in a scratch tree, reporting per
    patch (a failed patch is skipped and the rest still tried); nothing is
    left behind."""
    say = progress or (lambda m: None)
    tmp = Path(tempfile.mkdtemp(prefix="sgl-overlay-check-"))
    try:
        repo_dir = tmp / "tree"
        base = prepare_base(lock, repo_dir, repo, cache, progress)
        results = apply_all(stack, repo_dir, three_way, progress, keep_going=True)
        overlay = OverlayResult(OverlayStatus.NONE)
        if stack.overlay:
            say(f"checking {len(stack.overlay)} overlay file(s)")
            try:
                apply_overlay(repo_dir, lock, stack)
                overlay = OverlayResult(OverlayStatus.APPLIED, tuple(o.rel for o in stack.overlay))
            except ApplyError as e:
                overlay = OverlayResult(OverlayStatus.FAILED, error=e.message, hint=e.hint)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return CheckResult(base["base_commit"], base["tree"], stack.digest, results, overlay)
