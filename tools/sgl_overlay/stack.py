"""The stack's lifecycle: rebase onto a newer upstream (every patch
classified), refresh patches/ from an edited build tree without noise,
export a topic as a clean series for an upstream pull request, lint.

Classification is a pure function of what git reported for a patch
(``classify``); everything else is I/O around the tree builder.
"""
import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import builder, gitcmd, lock as lockmod, series, source, versions
from .errors import ApplyError, UsageError

RESOLVED = ("applied", "applied-3way", "merged-upstream", "emptied")
UNRESOLVED = ("conflict", "probably-upstream")
DOWNSTREAM_TRAILERS = ("Topic", "Upstream-Status")


# --------------------------------------------------------------------------
# classification (pure)

def classify(forward, reverse, patch_id_match, three_way, three_way_empty, reverse_reduced):
    """The status of one patch on a new upstream, from what was tried:
    ``forward`` strict git am worked; ``reverse`` it applies in reverse
    exactly; ``patch_id_match`` an upstream commit in the range has the same
    stable patch-id; ``three_way`` git am --3way worked; ``three_way_empty``
    the 3-way merge left nothing to change; ``reverse_reduced`` it applies
    in reverse with one line of context (a person should confirm)."""
    if forward:
        return "applied"
    if reverse or patch_id_match:
        return "merged-upstream"
    if three_way_empty:
        return "emptied"
    if three_way:
        return "applied-3way"
    if reverse_reduced:
        return "probably-upstream"
    return "conflict"


# --------------------------------------------------------------------------
# comparing patch texts modulo noise

_INDEX = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+( \d+)?$", re.M)
_HUNK = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", re.M)
_STAT = re.compile(r"\n---\n.*?\n\ndiff --git ", re.S)


def noise_free(text):
    """A patch mail without what a re-export changes although the change is
    the same: the From <commit> line, the diffstat, index lines, hunk line
    numbers and the signature."""
    text = series.normalized(text.encode()).decode()
    text = _STAT.sub("\n---\n\ndiff --git ", text, count=1)
    text = _INDEX.sub("index", text)
    return _HUNK.sub("@@", text)


def format_patch(tree, commit):
    """One commit as a mail, with the pinned git configuration."""
    return gitcmd.run(tree, "format-patch", "-1", "--stdout", "--no-signature", commit).stdout


def patch_id(text):
    p = subprocess.run(gitcmd.argv("patch-id", "--stable"), input=text, capture_output=True, text=True,
                       env=gitcmd.clean_env())
    return p.stdout.split()[0] if p.stdout.strip() else None


# --------------------------------------------------------------------------
# rebase / check --against

@dataclasses.dataclass
class Onto:
    """Where to rebase to: a release version, or a commit of --repo."""
    version: str | None = None
    commit: str | None = None
    repo: str | None = None

    @property
    def label(self):
        return self.version or (self.commit or "")[:12]


def _new_base(lock, onto, repo_dir, cache, progress):
    if onto.version:
        return source.base_from_release(onto.version, repo_dir, lock.subdir, lock.symlinks, cache, progress)
    if not onto.repo:
        raise UsageError("--onto COMMIT needs --repo URL_OR_PATH", hint="or give a release version")
    bare, key = source.bare_clone(onto.repo, cache, progress)
    r = gitcmd.run(bare, "rev-parse", "--verify", "--quiet", f"{onto.commit}^{{commit}}", check=False)
    if r.returncode:
        gitcmd.run(bare, "fetch", "--quiet", "--tags", key, "+refs/heads/*:refs/heads/*", check=False)
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
            "tree_normalized": source.normalized_tree(repo_dir, gitcmd.out(repo_dir, "rev-parse", f"{commit}:{lock.subdir}"))}


def _try(repo_dir, patch, *args):
    p = gitcmd.run(repo_dir, "am", "--quiet", "--committer-date-is-author-date", "--keep-non-patch", *args,
                   str(patch.path), check=False)
    if p.returncode:
        gitcmd.run(repo_dir, "am", "--abort", check=False)
    return p


def _upstream_patch_ids(onto, lock, cache):
    """Stable patch-ids of the upstream commits between the pin and the
    target (only where --repo gives the history)."""
    if not onto.repo:
        return {}
    bare, _ = source.bare_clone(onto.repo, cache, None)
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
        base = _new_base(lock, onto, new, cache, progress)
        gitcmd.run(new, "checkout", "--quiet", "-b", "patched")
        # the old blobs, so that --3way can find each patch's preimage
        gitcmd.run(new, "fetch", "--quiet", str(old), "+patched:refs/sgl-overlay/old")
        upstream_ids = _upstream_patch_ids(onto, lock, cache)
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
            if status in ("applied", "applied-3way"):
                entry["commit"] = gitcmd.out(new, "rev-parse", "HEAD")
                entry["text"] = format_patch(new, entry["commit"])
                entry["changed"] = noise_free(entry["text"]) != noise_free(p.raw.decode())
            if pid_commit:
                entry["upstream_commit"] = pid_commit
            if status in ("conflict", "probably-upstream") and failure:
                entry["failure"] = failure
            results.append(entry)
        return {"onto": onto.label, "base": base, "patches": results,
                "resolved": all(r["status"] in RESOLVED for r in results)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def new_lock(lock, onto, cache=None, progress=None):
    """The lock for release ``onto.version``, every field recomputed from
    the release artifact and the tag in ``onto.repo``, and verified: the
    artifact built with the new lock must reproduce the tag's tree."""
    if not onto.version:
        raise UsageError("--write needs --onto VERSION (a release)", hint="locks pin released versions")
    repo = onto.repo or lock.repo
    bare, key = source.bare_clone(repo, cache, progress)
    tag = f"v{onto.version}"
    c = gitcmd.run(bare, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}", check=False)
    if c.returncode:
        gitcmd.run(bare, "fetch", "--quiet", "--tags", key, check=False)
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
    artifact = source.fetch_release(onto.version, cache, progress)
    if not artifact.name.endswith(".whl"):
        raise UsageError(f"release {onto.version} publishes no wheel ({artifact.name})",
                         hint="the patched wheel needs a release wheel to start from")
    import zipfile
    with zipfile.ZipFile(artifact) as z:
        names = set(z.namelist())
        meta = z.read(f"sglang-{onto.version}.dist-info/METADATA").decode()
    deps = {"python": lock.dependencies.get("python", "cp311"), **versions.pins(meta, versions.wheel(artifact.name)[2])}
    candidate = dataclasses.replace(
        lock, tag=tag, version=onto.version, commit=commit, date=date, tree=tree,
        artifact_filename=artifact.name, artifact_sha256=source.sha256_file(artifact),
        generated=tuple(g for g in ("_version.py",) if f"sglang/{g}" in names),
        compiled=lock.compiled, symlinks=symlinks, executable=tuple(sorted(executable)), dependencies=deps,
        tree_normalized=source.normalized_tree(bare, tree))
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-lock-") as t:
        cache_art = source.cache_dir(cache) / "artifacts" / artifact.name
        if cache_art != artifact:
            shutil.copy(artifact, cache_art)
        base = source.base_from_artifact(candidate, Path(t) / "tree", cache, progress)
    if base["tree"] != tree:
        raise ApplyError(f"release {onto.version}: the artifact reconciled with the new lock gives tree "
                         f"{base['tree']}, the tag's is {tree}", hint="the release artifact differs from its tag")
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
                              "probably-upstream patches by dropping them, then run again")
    new = new_lock(lock, onto, cache, progress)
    written, dropped = [], []
    for r in report["patches"]:
        path = Path(root) / "patches" / r["patch"]
        if r["status"] in ("merged-upstream", "emptied"):
            dropped.append(r["patch"])
        elif r.get("changed"):
            path.write_text(r["text"])
            written.append(r["patch"])
    if dropped:
        _rewrite_series(Path(root) / "patches", [n for n in series.read_series(Path(root) / "patches")
                                                  if n not in dropped])
        for n in dropped:
            (Path(root) / "patches" / n).unlink()
    lockmod.write(new, Path(root) / "upstream.lock")
    return {"lock": new.as_dict(), "written": written, "dropped": dropped}


# --------------------------------------------------------------------------
# refresh

def _rewrite_series(patches_dir, names, topics=None):
    """Keep the series file's comment blocks; list ``names`` in order."""
    path = patches_dir / "series"
    old = path.read_text().splitlines()
    present = series.read_series(patches_dir) if path.exists() else []
    if names == present:
        return False
    keep = set(names)
    out, placed = [], set()
    for line in old:
        entry = line.split("#", 1)[0].strip()
        if entry and entry not in keep:
            continue
        if entry:
            placed.add(entry)
        out.append(line)
    for n in names:
        if n not in placed:
            out.append(n)
    # put entries back in the new order, in the slots entries occupy
    slots = [i for i, l in enumerate(out) if l.split("#", 1)[0].strip()]
    for i, n in zip(slots, names):
        out[i] = n
    path.write_text("\n".join(out) + "\n")
    return True


def tree_commits(tree):
    """The patch commits of a built tree: upstream..patched without the
    overlay commit."""
    revs = gitcmd.out(tree, "rev-list", "--reverse", "upstream..patched").split()
    out = []
    for c in revs:
        author, subject = gitcmd.out(tree, "log", "-1", "--format=%ae%x00%s", c).split("\0", 1)
        if author == gitcmd.TOOL_IDENTITY[1] and subject.startswith("overlay: "):
            continue
        out.append((c, subject))
    return out


def refresh(root, tree, write=True):
    """Regenerate patches/ from the commits of ``tree``.  A patch file is
    rewritten only when its change or message changed."""
    root = Path(root)
    stack = series.load(root, strict=False)
    by_subject = {p.subject: p for p in stack.patches}
    commits = tree_commits(tree)
    names, changes = [], []
    for i, (c, subject) in enumerate(commits):
        text = format_patch(tree, c)
        old = stack.patches[i] if i < len(stack.patches) and stack.patches[i].subject == subject else \
            by_subject.get(subject)
        name = old.name if old else slug(subject) + ".patch"
        names.append(name)
        if old is None:
            changes.append({"patch": name, "change": "added", "commit": c})
        elif noise_free(text) != noise_free(old.raw.decode()):
            changes.append({"patch": name, "change": "rewritten", "commit": c})
        else:
            continue
        if write:
            (root / "patches" / name).write_text(text)
    removed = [p.name for p in stack.patches if p.name not in names]
    changes += [{"patch": n, "change": "removed"} for n in removed]
    order_changed = names != [p.name for p in stack.patches if p.name in names] or bool(removed) or \
        any(c["change"] == "added" for c in changes)
    if write:
        if order_changed:
            _rewrite_series(root / "patches", names)
        for n in removed:
            (root / "patches" / n).unlink()
    return {"changes": changes, "series_changed": order_changed, "patches": names}


def slug(subject):
    s = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return "-".join(s.split("-")[:6]) or "patch"


# --------------------------------------------------------------------------
# lint

def lint(root):
    """Every problem with the stack, as dicts (patch, field, error, hint)."""
    root = Path(root)
    problems = []
    try:
        stack = series.load(root, strict=False)
    except UsageError as e:
        return [{"patch": None, "field": "series", "error": e.message, "hint": e.hint}]
    for p in stack.patches:
        for field, message, hint in series.lint(p):
            problems.append({"patch": p.name, "field": field, "error": message, "hint": hint})
        for pf in p.patchset:
            for h in pf:
                for line in h:
                    if line.is_added and line.value.rstrip("\n") != line.value.rstrip():
                        problems.append({"patch": p.name, "field": "whitespace",
                                         "error": f"patches/{p.name}: trailing whitespace in an added line "
                                                  f"of {pf.path} (line {line.target_line_no})",
                                         "hint": "strip it in the tree and refresh"})
                        break
        if p.topic == "debug" and not p.upstream_status.startswith("Inappropriate"):
            problems.append({"patch": p.name, "field": "Upstream-Status",
                             "error": f"patches/{p.name}: the debug topic is marked {p.upstream_status!r}",
                             "hint": "debug instrumentation is not for upstream: "
                                     "Upstream-Status: Inappropriate [debug instrumentation]"})
    return problems


# --------------------------------------------------------------------------
# export

def strip_trailers(text):
    """Remove this project's downstream-only trailers from a mail."""
    head, sep, rest = text.partition("\n---\n")
    head = re.sub(r"(?m)^(%s): .*(\n|\Z)" % "|".join(DOWNSTREAM_TRAILERS), "", head)
    return re.sub(r"\n\n+\Z", "\n", head.rstrip("\n") + "\n") + sep + rest if sep else head


def export(root, lock, topic, onto, out_dir, cache=None, progress=None, run_tests=True):
    """The topic's patches alone on ``onto``: verified to apply and to pass
    the topic's tests there, written as numbered mails plus a pull-request
    description."""
    say = progress or (lambda m: None)
    root = Path(root)
    stack = series.load(root)
    mine = [p for p in stack.patches if p.topic == topic]
    if not mine:
        topics = sorted({p.topic for p in stack.patches})
        raise UsageError(f"no patch has Topic: {topic}", hint=f"topics in the stack: {', '.join(topics) or 'none'}")
    inappropriate = [p.name for p in mine if p.upstream_status.startswith("Inappropriate")]
    if inappropriate:
        raise UsageError(f"topic {topic!r} is marked Upstream-Status: Inappropriate ({inappropriate[0]})",
                         hint="it is downstream-only and is not exported")
    sub = dataclasses.replace(stack, patches=[dataclasses.replace(p, index=i) for i, p in enumerate(mine, 1)],
                              overlay=[])
    tmp = Path(tempfile.mkdtemp(prefix="sgl-overlay-export-"))
    try:
        tree = tmp / "tree"
        report = rebase(lock, sub, onto, cache, progress, keep=tree)
        out = {"topic": topic, "onto": onto.label, "patches": report["patches"], "files": []}
        bad = [r for r in report["patches"] if r["status"] not in ("applied", "applied-3way")]
        if bad:
            out["status"] = "does-not-apply"
            return out
        tests = root / "tests" / topic
        if run_tests and tests.is_dir():
            say(f"running tests/{topic} against the exported tree")
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests),
                                "--tree", str(tree)], capture_output=True, text=True, cwd=root)
            last = (p.stdout.strip().splitlines() or [""])[-1]
            out["tests"] = {"command": f"python -m pytest tests/{topic} --tree <exported tree>",
                            "exit": p.returncode, "summary": last}
            if p.returncode:
                out["status"] = "tests-fail"
                return out
        else:
            out["tests"] = {"summary": f"no tests/{topic} folder" if run_tests else "not run"}
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for i, r in enumerate(report["patches"], 1):
            f = out_dir / f"{i:04d}-{slug(r['subject'])}.patch"
            text = strip_trailers(r["text"])
            text = text.replace("Subject: [PATCH] ", f"Subject: [PATCH {i}/{len(mine)}] ", 1) \
                if len(mine) > 1 else text
            f.write_text(text)
            out["files"].append(str(f))
        desc = out_dir / "pull-request.md"
        desc.write_text(_description(topic, mine, report, out))
        out["files"].append(str(desc))
        out["status"] = "exported"
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _description(topic, patches, report, out):
    lines = [f"# {topic}: {len(patches)} change(s)", "",
             f"Applies onto {report['onto']} ({report['base'].get('base_commit', '')[:12]}).", ""]
    for p, r in zip(patches, report["patches"]):
        lines += [f"## {p.subject}", "", p.body, "", f"Applies: {r['status']}.", ""]
    t = out.get("tests", {})
    lines += ["## Evidence", ""]
    if t.get("command"):
        lines += [f"`{t['command']}`: {t['summary']} (exit {t['exit']}).", ""]
    else:
        lines += [t.get("summary", ""), ""]
    return "\n".join(lines)
