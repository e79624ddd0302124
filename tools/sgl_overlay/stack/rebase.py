"""Rebase / check --against: the stack onto a newer upstream, every patch
classified; with --write, the new lock and the refreshed patches."""
import dataclasses
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from .. import archive, artifacts, base_tree, builder, clones, gitcmd, lock as lockmod, series, versions
from ..errors import FAILED, OK, ApplyError, UsageError
from .classify import APPLIES, LEAVES_SERIES, RESOLVED, UNRESOLVED, Status, classify
from .json_form import Result, hidden, optional
from .refresh import write_patches
from .texts import format_patch, noise_free, patch_id


@dataclasses.dataclass
class Onto:
    """Where to rebase to: a release version, or a commit of --repo."""
    version: str | None = None
    commit: str | None = None
    repo: str | None = None

    @property
    def label(self):
        return self.version or (self.commit or "")[:12]


def new_base(lock, onto, repo_dir, cache, progress, bare=None):
    """The upstream tree ``onto`` names, in ``repo_dir``; ``bare``: the --repo's clone,
    already refreshed by the caller (else refreshed here)."""
    if onto.version:
        return base_tree.base_from_release(onto.version, repo_dir, lock.subdir, lock.symlinks, cache, progress)
    if not onto.repo:
        raise UsageError("--onto COMMIT needs --repo URL_OR_PATH", hint="or give a release version")
    if bare is None:
        bare, _ = clones.fresh_clone(onto.repo, cache, progress)
    commit = gitcmd.commit_of(bare, onto.commit)
    if commit is None:
        raise UsageError(f"{onto.repo} has no commit {onto.commit!r}", hint="give a commit, tag or branch of it")
    gitcmd.init(repo_dir)
    gitcmd.run(repo_dir, "fetch", "--quiet", "--depth=1",
               "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack", "file://" + str(bare), commit)
    gitcmd.run(repo_dir, "update-ref", "refs/heads/upstream", commit)
    gitcmd.reset_hard(repo_dir, commit)
    return {"source": "git", "repo": onto.repo, "base_commit": commit,
            "tree_normalized": base_tree.normalized_tree(repo_dir, gitcmd.out(repo_dir, "rev-parse", f"{commit}:{lock.subdir}"))}


OLD = "refs/sgl-overlay/old"              # the old stack's commits, fetched into the new tree
OLD_BASE = "refs/sgl-overlay/old-base"    # the pin they were made on


def prepare_tree(lock, stack, onto, dest, cache=None, progress=None, bare=None):
    """The tree at ``dest`` a rebase works in: the upstream ``onto`` names on
    branch ``upstream``, HEAD on a new branch ``patched``, and the current
    stack built on the pin fetched as ``OLD`` (its base as ``OLD_BASE``) so
    that ``git am --3way`` finds each patch's preimage and ``git range-diff``
    sees the old series.  ``bare``: the --repo's clone, refreshed by the
    caller.  Returns the new base's facts (``new_base``)."""
    say = progress or (lambda m: None)
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-rebase-") as tmp:
        old = Path(tmp) / "old"
        say(f"building the current stack on {lock.tag}")
        builder.prepare_base(lock, old, None, cache, progress)
        builder.apply_all(stack, old, False, progress, keep_going=False)
        say(f"preparing upstream {onto.label}")
        base = new_base(lock, onto, Path(dest), cache, progress, bare)
        gitcmd.run(dest, "checkout", "--quiet", "-b", "patched")
        gitcmd.run(dest, "fetch", "--quiet", str(old), f"+patched:{OLD}", f"+upstream:{OLD_BASE}")
    return base


# git am --3way's words when the patch's index lines name blobs the tree lacks
NO_PREIMAGE = ("could not build fake ancestor", "sha1 information is lacking")


def old_commit_of(repo_dir, patch, total):
    """The commit of ``patch`` in the old stack fetched as ``OLD`` (patch i of
    n is ``OLD~(n - i)``), or None where the tree has no ``OLD``."""
    return gitcmd.commit_of(repo_dir, f"{OLD}~{total - patch.index}")


def _am_3way_from_old(repo_dir, patch, total, args):
    """git am --3way with the patch as the old stack's own commit re-exported
    (``format-patch`` of ``OLD~(n - i)``): its index lines name the blobs the
    old stack really had.  A patch file's index lines are noise to refresh
    (docs/stack.md), so after an earlier patch changed they can name blobs no
    tree has, and git am --3way then cannot build the merge base at all."""
    old = old_commit_of(repo_dir, patch, total)
    if not old:
        return None
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-old-") as tmp:
        f = Path(tmp) / patch.name
        f.write_text(format_patch(repo_dir, old))
        return gitcmd.am(repo_dir, f, "--3way", *args)


def unmerged(repo_dir):
    """The paths git left unmerged in the index (sorted)."""
    return tuple(sorted(set(gitcmd.out(repo_dir, "diff", "--name-only", "--diff-filter=U").split("\n")) - {""}))


@dataclasses.dataclass(frozen=True)
class Attempt:
    """What git reported for one patch on the new upstream."""
    status: Status
    failure: dict | None = None          # builder.diagnose()'s report, when strict git am failed
    upstream_commit: str | None = None   # the upstream commit with its patch-id
    stopped: bool = False                # git am --3way's stopped state is left in the tree (keep_conflict)
    conflicted: tuple = ()               # then: the paths it left unmerged
    git_am: str = ""                     # then: what git am --3way said


def attempt(repo_dir, patch, total, upstream_commit=None, keep_conflict=False):
    """Try ``patch`` on the tree (HEAD clean): strict git am, then, unless it
    is already upstream (applies in reverse, or ``upstream_commit`` has its
    patch-id), git am --3way; classified by ``classify``.  An applied patch
    is committed.  A 3-way merge that fails is aborted, or, with
    ``keep_conflict``, left as git am stopped (the conflict markers in the
    files, the index unmerged) for a person to resolve."""
    if gitcmd.am(repo_dir, patch.path, "--no-3way").returncode == 0:
        return Attempt(Status.APPLIED)
    gitcmd.am_abort(repo_dir)
    failure = builder.diagnose(repo_dir, patch, total)
    rev = failure["applies_in_reverse"]
    tw = tw_empty = rev_reduced = stopped = False
    conflicted, said = (), ""
    if not (rev or upstream_commit):
        rev_reduced = gitcmd.run(repo_dir, "apply", "--check", "--reverse", "-C1", str(patch.path),
                                 check=False).returncode == 0
        extra = ["--rerere-autoupdate"] if keep_conflict else []
        t = gitcmd.am(repo_dir, patch.path, "--3way", *extra)
        if t.returncode and any(w in t.stdout + t.stderr for w in NO_PREIMAGE) and \
                old_commit_of(repo_dir, patch, total):
            gitcmd.am_abort(repo_dir)
            t = _am_3way_from_old(repo_dir, patch, total, extra)
        tw = t.returncode == 0
        tw_empty = not tw and "No changes" in (t.stdout + t.stderr)
        if tw and not gitcmd.out(repo_dir, "diff", "--name-only", "HEAD~1", "HEAD"):
            gitcmd.reset_hard(repo_dir, "HEAD~1")
            tw, tw_empty = False, True
        if not tw:
            if keep_conflict and not tw_empty:
                stopped, conflicted, said = True, unmerged(repo_dir), (t.stderr.strip() or t.stdout.strip())
            else:
                gitcmd.am_abort(repo_dir)
    status = classify(False, rev, bool(upstream_commit), tw, tw_empty, rev_reduced)
    return Attempt(status, failure, upstream_commit, stopped, conflicted, said)


def _upstream_patch_ids(onto, lock, bare):
    """Stable patch-ids of the upstream commits between the pin and the
    target (only where --repo gives the history: ``bare``, its refreshed clone)."""
    if bare is None:
        return {}
    target = onto.commit or f"v{onto.version}"
    if gitcmd.run(bare, "cat-file", "-e", lock.commit, check=False).returncode:
        return {}
    log = gitcmd.run(bare, "log", "-p", "--no-merges", "--format=commit %H", f"{lock.commit}..{target}", "--",
                     lock.subdir, check=False)
    if log.returncode:
        return {}
    return dict(gitcmd.patch_ids(log.stdout))


def merged_upstream(stack, onto, lock, bare):
    """{patch name: upstream commit} for the patches whose stable patch-id an
    upstream commit between the pin and ``onto`` has (with --repo's clone ``bare``)."""
    ids = _upstream_patch_ids(onto, lock, bare)
    return {p.name: ids[pid] for p in stack.patches if (pid := patch_id(p.raw.decode())) in ids}


# git am's words for a conflict that a recorded resolution (git rerere) resolved
REUSED = re.compile(r"^(?:Staged|Resolved) '(.+)' using previous resolution\.$", re.M)


def use_resolutions(tree, rr_cache):
    """rerere on in ``tree`` with a copy of the recorded resolutions in
    ``rr_cache`` (build/port-rr-cache): they are reused, nothing is written
    back.  False (rerere left off) when there are none."""
    if not rr_cache or not Path(rr_cache).is_dir() or not any(Path(rr_cache).iterdir()):
        return False
    shutil.copytree(rr_cache, Path(tree) / ".git" / "rr-cache", dirs_exist_ok=True)
    gitcmd.rerere_on(tree)
    return True


def reuse_resolution(tree, a):
    """After ``attempt(keep_conflict=True)``: where recorded resolutions
    resolved every conflict of the stopped 3-way merge, commit it (``git am
    --continue``) and return the paths they resolved; else abort git am's
    stopped state and return ()."""
    reused = tuple(REUSED.findall(a.git_am))
    if reused and not unmerged(tree) and gitcmd.am_continue(tree).returncode == 0:
        return reused
    gitcmd.am_abort(tree)
    return ()


@dataclasses.dataclass(frozen=True)
class RebasedPatch(Result):
    """One patch of a rebase (or check --against): what git reported and what became of it."""
    patch: str
    index: int
    subject: str
    topic: str
    status: Status
    reused: tuple | None = optional()          # paths a recorded resolution resolved
    commit: str | None = optional()            # its commit in the rebased tree (where it applies)
    text: str | None = hidden()                # that commit as a mail
    changed: bool | None = optional()          # the mail differs from the patch file beyond noise
    upstream_commit: str | None = optional()   # the upstream commit with its patch-id
    failure: dict | None = optional()          # builder.diagnose()'s report, where it does not resolve
    git_status: Status | None = optional()     # ported: what git reported
    ported: dict | None = optional()           # ported: the port patch that carries it (ports.coverage)
    not_ported: dict | None = optional()       # a port series says why it does not carry it
    covered: dict | None = optional()          # check --against: the port that carries it


@dataclasses.dataclass(frozen=True)
class Written(Result):
    """What ``rebase --write`` wrote: the new lock and the patch files."""
    lock: dict
    written: tuple             # the patch files rewritten
    dropped: tuple             # the patches that left the series


@dataclasses.dataclass(frozen=True)
class RebaseReport(Result):
    """``rebase`` / ``check --against``: every patch of the stack on the new upstream."""
    onto: str
    base: dict                 # the new upstream's facts (new_base)
    patches: tuple             # RebasedPatch, in series order
    resolved: bool             # every patch resolved: --write may write
    ported: int | None = optional()            # how many patches a port series covers
    port_series: tuple | None = optional()     # the port series folders made for that upstream
    port_line: str | None = optional()         # ports.covering_line
    written: Written | None = optional()

    @property
    def exit_code(self):
        """0 every patch resolved; 1 one does not (or a port series replaces it)."""
        return OK if self.resolved else FAILED


def rebase(lock, stack, onto, cache=None, progress=None, keep=None, rr_cache=None):
    """Apply the stack onto ``onto`` and classify every patch.  Returns the
    report; with ``keep`` (a directory) the rebased tree is left there.
    ``rr_cache``: recorded conflict resolutions (build/port-rr-cache) to
    reuse, read only: a conflict they resolve entirely is ``applied-3way``
    with ``reused`` (the paths)."""
    say = progress or (lambda m: None)
    tmp = Path(tempfile.mkdtemp(prefix="sgl-overlay-rebase-"))
    try:
        new = Path(keep) if keep else tmp / "new"
        # the --repo's history, refreshed once for the whole rebase
        bare = clones.fresh_clone(onto.repo, cache, progress)[0] if onto.repo else None
        base = prepare_tree(lock, stack, onto, new, cache, progress, bare)
        merged = merged_upstream(stack, onto, lock, bare)
        rerere = use_resolutions(new, rr_cache)
        total = len(stack.patches)
        results = []
        for p in stack.patches:
            say(f"patch {p.index}/{total} {p.name}")
            a = attempt(new, p, total, merged.get(p.name), keep_conflict=rerere)
            reused = None
            if a.stopped:
                reused = reuse_resolution(new, a) or None
                if reused:
                    a = dataclasses.replace(a, status=Status.APPLIED_3WAY, stopped=False)
            commit = text = changed = None
            if a.status in APPLIES:
                commit = gitcmd.head(new)
                text = format_patch(new, commit)
                changed = noise_free(text) != noise_free(p.raw.decode())
            results.append(RebasedPatch(p.name, p.index, p.subject, p.topic, a.status, reused, commit, text, changed,
                                        a.upstream_commit or None,
                                        a.failure if a.status in UNRESOLVED and a.failure else None))
        return RebaseReport(onto.label, base, tuple(results), all(r.status in RESOLVED for r in results))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def new_lock(lock, onto, cache=None, progress=None, bare=None):
    """The lock for release ``onto.version``, every field recomputed from
    the release artifact and the tag in ``onto.repo`` (else the lock's
    repo), and verified: the artifact built with the new lock must reproduce
    the tag's tree.  ``bare``: that repository's clone, already refreshed by
    the caller (else refreshed here)."""
    if not onto.version:
        raise UsageError("--write needs --onto VERSION (a release)", hint="locks pin released versions")
    repo = onto.repo or lock.repo
    if bare is None:
        bare, _ = clones.fresh_clone(repo, cache, progress)
    tag = f"v{onto.version}"
    commit = gitcmd.commit_of(bare, tag)
    if commit is None:
        raise UsageError(f"{repo} has no tag {tag}", hint="pass --repo with SGLang's history")
    tree = gitcmd.out(bare, "rev-parse", f"{commit}:{lock.subdir}")
    date = gitcmd.out(bare, "log", "-1", "--format=%cs", commit)
    artifact = artifacts.release(onto.version, cache, progress)
    if not artifact.name.endswith(".whl"):
        raise UsageError(f"release {onto.version} publishes no wheel ({artifact.name})",
                         hint="the patched wheel needs a release wheel to start from")
    with zipfile.ZipFile(artifact.path) as z:
        names = set(z.namelist())
    ls = [rec.split(b"\t", 1) for rec in gitcmd.run(bare, "ls-tree", "-r", "-z", tree, binary=True).stdout.split(b"\0")
          if rec]
    root = lock.artifact_root.rstrip("/") + "/"
    excluded = lockmod.excluded_directories([path.decode() for _, path in ls],
                                            {n[len(root):] for n in names if n.startswith(root)})
    inside = tuple(d + "/" for d in excluded)
    executable, symlinks = [], {}
    for meta, path in ls:
        mode, _, sha = meta.split()
        if path.decode().startswith(inside):
            continue
        if mode == b"100755":
            executable.append(path.decode())
        elif mode == b"120000":
            symlinks[path.decode()] = gitcmd.run(bare, "cat-file", "blob", sha.decode()).stdout
    meta = archive.release_metadata(artifact.path)
    deps = {"python": lock.dependencies.get("python", "cp311"), **versions.pins(meta, versions.wheel(artifact.name)[2])}
    candidate = dataclasses.replace(
        lock, tag=tag, version=onto.version, commit=commit, date=date, tree=tree,
        artifact_filename=artifact.name, artifact_sha256=artifact.sha256,
        generated=tuple(g for g in ("_version.py",) if f"sglang/{g}" in names),
        compiled=lock.compiled, symlinks=symlinks, executable=tuple(sorted(executable)), dependencies=deps,
        excluded=excluded, tree_normalized=base_tree.normalized_tree(bare, tree, excluded),
        wheels={})  # other Python tags' wheels of the new release: recorded on first use
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-lock-") as t:
        base = base_tree.base_from_artifact(candidate, Path(t) / "tree", cache, progress)
    shipped_tree = base_tree.tree_without(bare, tree, excluded)
    if base["tree"] != shipped_tree:
        raise ApplyError(f"release {onto.version}: the artifact reconciled with the new lock gives tree "
                         f"{base['tree']}, the tag's is {shipped_tree}"
                         + (f" (less {', '.join(excluded)}, which the artifact does not ship)" if excluded else ""),
                         hint="the release artifact differs from its tag")
    dep = lockmod.missing_dependency(deps)
    if dep:
        raise UsageError(f"release {onto.version}: METADATA pins no {dep}",
                         hint="record it by hand in [dependencies] after --write")
    return candidate


def write_rebase(root, lock, stack, report, onto, cache=None, progress=None):
    """Write the new lock and the refreshed patches (only when every patch
    is resolved); merged-upstream and emptied patches leave the series."""
    if not report.resolved:
        bad = [f"{r.patch} ({r.status})" for r in report.patches if r.status not in RESOLVED]
        raise ApplyError(f"not writing: {len(bad)} patch(es) unresolved: {', '.join(bad)}",
                         hint="resolve conflicts (refresh the patch on the new upstream) and confirm "
                              "probably-upstream patches by dropping them, then run again; a ported patch's "
                              "port series (patches/ports/) replaces it there, by hand")
    new = new_lock(lock, onto, cache, progress)
    written, dropped, texts = [], [], {}
    for r in report.patches:
        if r.status in LEAVES_SERIES:
            dropped.append(r.patch)
        elif r.changed:
            texts[r.patch] = r.text
            written.append(r.patch)
    keep = [n for n in series.read_series(Path(root) / "patches") if n not in dropped] if dropped else None
    write_patches(root, texts, keep, dropped)      # patches/ in one swap, then the lock (atomic replace)
    lockmod.write(new, Path(root) / "upstream.lock")
    return Written(new.as_dict(), tuple(written), tuple(dropped))
