"""Rebase / check --against: the stack onto a newer upstream, every patch
classified; with --write, the new lock and the refreshed patches."""
import dataclasses
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from .. import archive, artifacts, base_tree, builder, clones, gitcmd, lock as lockmod, series, versions
from ..errors import ApplyError, UsageError
from .classify import APPLIES, LEAVES_SERIES, RESOLVED, UNRESOLVED, classify
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
    r = gitcmd.run(bare, "rev-parse", "--verify", "--quiet", f"{onto.commit}^{{commit}}", check=False)
    if r.returncode:
        raise UsageError(f"{onto.repo} has no commit {onto.commit!r}", hint="give a commit, tag or branch of it")
    commit = r.stdout.strip()
    gitcmd.init(repo_dir)
    gitcmd.run(repo_dir, "fetch", "--quiet", "--depth=1",
               "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack", "file://" + str(bare), commit)
    gitcmd.run(repo_dir, "update-ref", "refs/heads/upstream", commit)
    gitcmd.run(repo_dir, "reset", "--quiet", "--hard", commit)
    return {"source": "git", "repo": onto.repo, "base_commit": commit,
            "tree_normalized": base_tree.normalized_tree(repo_dir, gitcmd.out(repo_dir, "rev-parse", f"{commit}:{lock.subdir}"))}


def _try(repo_dir, patch, *args):
    p = gitcmd.run(repo_dir, "am", "--quiet", "--committer-date-is-author-date", "--keep-non-patch", *args,
                   str(patch.path), check=False)
    if p.returncode:
        gitcmd.run(repo_dir, "am", "--abort", check=False)
    return p


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
    p = subprocess.run(gitcmd.argv("patch-id", "--stable"), input=log.stdout, capture_output=True, text=True,
                       env=gitcmd.clean_env())
    return {pid: c for pid, c in (l.split() for l in p.stdout.splitlines())}


def rebase(lock, stack, onto, cache=None, progress=None, keep=None):
    """Apply the stack onto ``onto`` and classify every patch.  Returns the
    report; with ``keep`` (a directory) the rebased tree is left there."""
    say = progress or (lambda m: None)
    tmp = Path(tempfile.mkdtemp(prefix="sgl-overlay-rebase-"))
    try:
        old = tmp / "old"
        say(f"building the current stack on {lock.tag}")
        builder.prepare_base(lock, old, None, cache, progress)
        builder.apply_all(stack, old, False, progress, keep_going=False)
        new = Path(keep) if keep else tmp / "new"
        say(f"preparing upstream {onto.label}")
        # the --repo's history, refreshed once for the whole rebase
        bare = clones.fresh_clone(onto.repo, cache, progress)[0] if onto.repo else None
        base = new_base(lock, onto, new, cache, progress, bare)
        gitcmd.run(new, "checkout", "--quiet", "-b", "patched")
        # the old blobs, so that --3way can find each patch's preimage
        gitcmd.run(new, "fetch", "--quiet", str(old), "+patched:refs/sgl-overlay/old")
        upstream_ids = _upstream_patch_ids(onto, lock, bare)
        total = len(stack.patches)
        results = []
        for p in stack.patches:
            say(f"patch {p.index}/{total} {p.name}")
            entry = {"patch": p.name, "index": p.index, "subject": p.subject, "topic": p.topic}
            fwd = _try(new, p, "--no-3way").returncode == 0
            rev = rev_reduced = tw = tw_empty = False
            pid_commit = None
            failure = None
            if not fwd:
                failure = builder.diagnose(new, p, total)
                rev = failure["applies_in_reverse"]
                pid_commit = upstream_ids.get(patch_id(p.raw.decode()))
                if not (rev or pid_commit):
                    t = _try(new, p, "--3way")
                    tw = t.returncode == 0
                    tw_empty = not tw and "No changes" in (t.stdout + t.stderr)
                    if tw and not gitcmd.out(new, "diff", "--name-only", "HEAD~1", "HEAD"):
                        gitcmd.run(new, "reset", "--quiet", "--hard", "HEAD~1")
                        tw, tw_empty = False, True
                    if not (tw or tw_empty):
                        rev_reduced = gitcmd.run(new, "apply", "--check", "--reverse", "-C1", str(p.path),
                                                 check=False).returncode == 0
            status = classify(fwd, rev, bool(pid_commit), tw, tw_empty, rev_reduced)
            entry["status"] = status
            if status in APPLIES:
                entry["commit"] = gitcmd.out(new, "rev-parse", "HEAD")
                entry["text"] = format_patch(new, entry["commit"])
                entry["changed"] = noise_free(entry["text"]) != noise_free(p.raw.decode())
            if pid_commit:
                entry["upstream_commit"] = pid_commit
            if status in UNRESOLVED and failure:
                entry["failure"] = failure
            results.append(entry)
        return {"onto": onto.label, "base": base, "patches": results,
                "resolved": all(r["status"] in RESOLVED for r in results)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _paths(ls):
    for rec in filter(None, ls.split(b"\0")):
        yield rec.split(b"\t", 1)[1]


def _under(path, dirs):
    return any(path.startswith(d + "/") for d in dirs)


def unshipped_dirs(tag_paths, artifact_names, root, version):
    """The directories of the tag's tree (paths relative to the subdir) that
    the release artifact ships nothing of, each the topmost such directory
    that holds a missing file; a missing file whose own directory the
    artifact does ship from cannot be reconciled (ApplyError)."""
    shipped = {n[len(root) + 1:] for n in artifact_names if n.startswith(root + "/")}
    shipped_dirs = set()
    for n in shipped:
        parts = n.split("/")[:-1]
        shipped_dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    tops = set()
    for p in tag_paths:
        if p in shipped or _under(p, tops):
            continue
        parts = p.split("/")
        top = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) not in shipped_dirs), None)
        if top is None:
            raise ApplyError(f"release {version}: the artifact lacks {p}, but ships other files of its directory",
                             hint="the lock can leave out whole directories only (artifact.reconcile.unshipped)")
        tops.add(top)
    return sorted(tops)


def new_lock(lock, onto, cache=None, progress=None):
    """The lock for release ``onto.version``, every field recomputed from
    the release artifact and the tag in ``onto.repo``, and verified: the
    artifact built with the new lock must reproduce the tag's tree."""
    if not onto.version:
        raise UsageError("--write needs --onto VERSION (a release)", hint="locks pin released versions")
    repo = onto.repo or lock.repo
    bare, _ = clones.fresh_clone(repo, cache, progress)
    tag = f"v{onto.version}"
    c = gitcmd.run(bare, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}", check=False)
    if c.returncode:
        raise UsageError(f"{repo} has no tag {tag}", hint="pass --repo with SGLang's history")
    commit = c.stdout.strip()
    tree = gitcmd.out(bare, "rev-parse", f"{commit}:{lock.subdir}")
    date = gitcmd.out(bare, "log", "-1", "--format=%cs", commit)
    ls = gitcmd.run(bare, "ls-tree", "-r", "-z", tree, binary=True).stdout
    executable, symlinks = [], {}
    for rec in filter(None, ls.split(b"\0")):
        meta, path = rec.split(b"\t", 1)
        mode, _, sha = meta.split()
        if mode == b"100755":
            executable.append(path.decode())
        elif mode == b"120000":
            symlinks[path.decode()] = gitcmd.run(bare, "cat-file", "blob", sha.decode()).stdout
    artifact = artifacts.release(onto.version, cache, progress)
    if not artifact.name.endswith(".whl"):
        raise UsageError(f"release {onto.version} publishes no wheel ({artifact.name})",
                         hint="the patched wheel needs a release wheel to start from")
    with zipfile.ZipFile(artifact.path) as z:
        names = set(z.namelist())
    unshipped = unshipped_dirs([p.decode() for p in _paths(ls)], names, lock.artifact_root, onto.version)
    executable = [p for p in executable if not _under(p, unshipped)]
    symlinks = {p: v for p, v in symlinks.items() if not _under(p, unshipped)}
    meta = archive.release_metadata(artifact.path)
    deps = {"python": lock.dependencies.get("python", "cp311"), **versions.pins(meta, versions.wheel(artifact.name)[2])}
    candidate = dataclasses.replace(
        lock, tag=tag, version=onto.version, commit=commit, date=date, tree=tree,
        artifact_filename=artifact.name, artifact_sha256=artifact.sha256,
        generated=tuple(g for g in ("_version.py",) if f"sglang/{g}" in names),
        compiled=lock.compiled, symlinks=symlinks, executable=tuple(sorted(executable)), dependencies=deps,
        tree_normalized=base_tree.normalized_tree(bare, tree), wheels={},   # other Pythons' wheels: recorded at first use
        unshipped={d: base_tree.normalized_tree(bare, gitcmd.out(bare, "rev-parse", f"{tree}:{d}")) for d in unshipped})
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-lock-") as t:
        base = base_tree.base_from_artifact(candidate, Path(t) / "tree", cache, progress)
        shipped = base["tree"]
        for d in unshipped:   # the exact ids too: the artifact plus the unshipped directories is the tag
            shipped = base_tree.graft(Path(t) / "tree", shipped, d, gitcmd.out(bare, "rev-parse", f"{tree}:{d}"))
    if shipped != tree:
        raise ApplyError(f"release {onto.version}: the artifact reconciled with the new lock gives tree "
                         f"{shipped}, the tag's is {tree}", hint="the release artifact differs from its tag")
    for dep in ("torch", "transformers", "sglang-kernel", "flashinfer_python"):
        if dep not in deps:
            raise UsageError(f"release {onto.version}: METADATA pins no {dep}",
                             hint="record it by hand in [dependencies] after --write")
    return candidate


def write_rebase(root, lock, stack, report, onto, cache=None, progress=None):
    """Write the new lock and the refreshed patches (only when every patch
    is resolved); merged-upstream and emptied patches leave the series."""
    if not report["resolved"]:
        bad = [f"{r['patch']} ({r['status']})" for r in report["patches"] if r["status"] not in RESOLVED]
        raise ApplyError(f"not writing: {len(bad)} patch(es) unresolved: {', '.join(bad)}",
                         hint="resolve conflicts (refresh the patch on the new upstream) and confirm "
                              "probably-upstream patches by dropping them, then run again; a ported patch's "
                              "port series (patches/ports/) replaces it there, by hand")
    new = new_lock(lock, onto, cache, progress)
    written, dropped, texts = [], [], {}
    for r in report["patches"]:
        if r["status"] in LEAVES_SERIES:
            dropped.append(r["patch"])
        elif r.get("changed"):
            texts[r["patch"]] = r["text"]
            written.append(r["patch"])
    keep = [n for n in series.read_series(Path(root) / "patches") if n not in dropped] if dropped else None
    write_patches(root, texts, keep, dropped)      # patches/ in one swap, then the lock (atomic replace)
    lockmod.write(new, Path(root) / "upstream.lock")
    return {"lock": new.as_dict(), "written": written, "dropped": dropped}
