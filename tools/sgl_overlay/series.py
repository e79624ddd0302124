"""The patch stack: ``patches/series``, the patch mails, ``overlay/``, and
the stack digest.  No git here: parsing and validation only (unidiff for
the diffs).  See docs/patches.md.
"""
import dataclasses
import email
import email.policy
import hashlib
import os
import re
import stat
import tomllib
from pathlib import Path

import unidiff

from .errors import UsageError
from .paths import relpath

PATCH_ROOT = "python"          # patches and overlay touch only python/...
PORT_ROOTS = (PATCH_ROOT, "test")   # a ported series may also add upstream-style tests (test/...)
OVERLAY_MANIFEST = "overlay.toml"
UPSTREAM_STATUS = re.compile(
    r"^(Pending|Submitted \[[^\]]+\]|Backport \[[^\]]+\]|Denied \[[^\]]+\]|"
    r"Inactive-Upstream \[[^\]]+\]|Inappropriate \[[^\]]+\])$")
TOPIC = re.compile(r"^[a-z0-9][a-z0-9-]*$")
FROM_LINE = re.compile(rb"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001\n")
SIGNATURE = re.compile(rb"\n-- \n[^\n]*\n*\Z")
TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): (.+)$")


@dataclasses.dataclass
class Patch:
    name: str
    path: Path
    index: int                # 1-based position in the series
    subject: str
    author: str
    date: str
    body: str                 # message body without the trailers
    trailers: dict
    files: list               # paths the diff touches
    added: int
    removed: int
    patchset: object = dataclasses.field(repr=False, default=None)
    raw: bytes = dataclasses.field(repr=False, default=b"")

    @property
    def topic(self):
        return self.trailers.get("Topic", "")

    @property
    def upstream_status(self):
        return self.trailers.get("Upstream-Status", "")

    def label(self, total):
        return f"patch {self.index}/{total} {self.name} ({self.subject!r})"

    def summary(self):
        return {"index": self.index, "name": self.name, "subject": self.subject, "topic": self.topic,
                "upstream_status": self.upstream_status, "files": self.files,
                "added": self.added, "removed": self.removed}


@dataclasses.dataclass
class OverlayFile:
    rel: str                  # path in the tree, e.g. python/sglang/srt/x.py
    path: Path                # file in overlay/
    executable: bool
    replaces: str | None      # upstream blob id it replaces, from overlay.toml


@dataclasses.dataclass
class Stack:
    root: Path
    patches: list
    overlay: list
    digest: str

    def summary(self):
        return {"digest": self.digest, "patches": [p.summary() for p in self.patches],
                "overlay": [o.rel for o in self.overlay]}


def normalized(raw):
    """Patch bytes without what changes on every re-export but not the
    result (the From <commit> line, the git version signature)."""
    return SIGNATURE.sub(b"\n", FROM_LINE.sub(b"", raw.replace(b"\r\n", b"\n")))


def read_series(patches_dir):
    where = patches_dir / "series"
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{where}: series file not found",
                         hint="create patches/series listing the patch files in order (may be empty)")
    names, seen = [], {}
    for n, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        if "/" in entry or entry.startswith(".") or not entry.endswith(".patch"):
            raise UsageError(f"{where}:{n}: entry {entry!r} is not a .patch file name in patches/",
                             hint="one file name a line, no directories, ending in .patch")
        if re.match(r"^\d+[-_]", entry):
            raise UsageError(f"{where}:{n}: entry {entry!r} has a numeric prefix",
                             hint="the order lives in the series file; name patches by what they do")
        if entry in seen:
            raise UsageError(f"{where}:{n}: {entry!r} is listed twice (first at line {seen[entry]})",
                             hint="list each patch once")
        if not (patches_dir / entry).is_file():
            raise UsageError(f"{where}:{n}: series entry {entry!r} has no file patches/{entry}",
                             hint="add the file or remove the entry")
        seen[entry] = n
        names.append(entry)
    strays = sorted(f.name for f in patches_dir.glob("*.patch") if f.name not in seen)
    if strays:
        raise UsageError(f"{where}: patches/{strays[0]} is not in the series"
                         + (f" (and {len(strays) - 1} more)" if len(strays) > 1 else ""),
                         hint="add it to patches/series in its place, or delete it")
    return names


def parse_patch(path, index, where=None, roots=(PATCH_ROOT,)):
    """One patch mail, parsed and checked; ``where`` names it in errors
    (default patches/NAME), ``roots`` are the top folders its paths may touch."""
    raw = path.read_bytes()
    where = where or f"patches/{path.name}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: not UTF-8 ({e})", hint="re-export the patch with git format-patch")
    if not text.startswith("From "):
        raise UsageError(f"{where}: not a git format-patch mail (no 'From ' line)",
                         hint="export with git format-patch, or see docs/patches.md")
    head, sep, rest = text.partition("\n\n")
    msg = email.message_from_string(head + "\n\n", policy=email.policy.default)
    fields = {}
    for key in ("From", "Date", "Subject"):
        if not msg.get(key):
            raise UsageError(f"{where}: missing header '{key}:'", hint="see docs/patches.md for the mail format")
        fields[key] = str(msg[key]).strip()
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", " ".join(fields["Subject"].split()))
    m = re.search(r"^(---\n|diff --git )", rest, re.M)
    if not m:
        raise UsageError(f"{where}: no diff found", hint="a patch must change something")
    message = rest[:m.start()].strip("\n")
    diff_at = rest.find("\ndiff --git ", m.start() - 1)
    if diff_at < 0:
        raise UsageError(f"{where}: no 'diff --git' section", hint="export with git format-patch")
    diff = rest[diff_at + 1:]
    diff = re.sub(r"\n-- \n[^\n]*\n*\Z", "\n", diff)
    paragraphs = message.split("\n\n")
    trailers = {}
    if paragraphs and all(TRAILER.match(l) for l in paragraphs[-1].splitlines() if l.strip()):
        for line in paragraphs[-1].splitlines():
            k, v = TRAILER.match(line).groups()
            trailers[k] = v.strip()
        paragraphs = paragraphs[:-1]
    body = "\n\n".join(paragraphs).strip()
    try:
        ps = unidiff.PatchSet(diff)
    except unidiff.UnidiffParseError as e:
        raise UsageError(f"{where}: the diff does not parse: {e}", hint="re-export the patch with git format-patch")
    files, added, removed = [], 0, 0
    for pf in ps:
        for p in {pf.source_file, pf.target_file}:
            if p == "/dev/null":
                continue
            if p[:2] not in ("a/", "b/"):
                raise UsageError(f"{where}: path {p!r} lacks the a/ b/ prefixes",
                                 hint="export with git format-patch (default prefixes)")
            under = next((r for r in roots if p[2:].startswith(r + "/")), roots[0])
            relpath(p[2:], "diff", where, under=under)
        _check_symlink(pf, where)
        files.append(pf.path)
        added += pf.added
        removed += pf.removed
    if not files:
        raise UsageError(f"{where}: the diff changes no file", hint="a patch must change something")
    return Patch(name=path.name, path=path, index=index, subject=subject, author=fields["From"],
                 date=fields["Date"], body=body, trailers=trailers, files=files, added=added,
                 removed=removed, patchset=ps, raw=raw)


SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode|index [0-9a-f]+\.\.[0-9a-f]+) 120000$")


def _check_symlink(pf, where):
    """A symlink the diff creates or retargets must point inside the tree:
    its target, joined to the link's directory, may not be absolute nor
    climb above the tree's root (UsageError naming the file and target)."""
    if not any(SYMLINK_MODE.match(line.rstrip("\n")) for line in pf.patch_info or []):
        return
    if pf.is_removed_file:
        return
    target = "".join(line.value for hunk in pf for line in hunk
                     if line.is_added or line.is_context).rstrip("\n")
    link = pf.path
    parts = []
    bad = None
    if not target or "\0" in target:
        bad = "is empty"
    elif target.startswith("/"):
        bad = "is absolute"
    else:
        for part in list(os.path.dirname(link).split("/")) + target.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    bad = "climbs out of the tree"
                    break
                parts.pop()
            else:
                parts.append(part)
    if bad:
        raise UsageError(f"{where}: symlink {link!r} -> {target!r} {bad}",
                         hint="a symlink a patch creates must resolve inside the tree")


def lint(patch, where=None):
    """Problems with a patch's metadata, as (field, message, hint)."""
    where = where or f"patches/{patch.name}"
    out = []
    if not patch.body:
        out.append(("body", f"{where}: the message has no body",
                    "say why the patch exists and when it can be dropped"))
    status = patch.upstream_status
    if not status:
        out.append(("Upstream-Status", f"{where}: missing trailer 'Upstream-Status:'",
                    "add e.g. 'Upstream-Status: Pending' (see docs/patches.md)"))
    elif not UPSTREAM_STATUS.match(status):
        out.append(("Upstream-Status", f"{where}: Upstream-Status {status!r} is not one of Yocto's forms",
                    "Pending | Submitted [url] | Backport [ref] | Denied [reason] | "
                    "Inactive-Upstream [ref] | Inappropriate [reason]"))
    if not patch.topic:
        out.append(("Topic", f"{where}: missing trailer 'Topic:'", "add e.g. 'Topic: memory'"))
    elif not TOPIC.match(patch.topic):
        out.append(("Topic", f"{where}: Topic {patch.topic!r} is not a lower-case word",
                    "use lower-case letters, digits and '-'"))
    return out


def read_overlay(overlay_dir):
    files = []
    manifest_path = overlay_dir / OVERLAY_MANIFEST
    replaces = {}
    if manifest_path.exists():
        try:
            data = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise UsageError(f"{manifest_path}: not valid TOML: {e}", hint="see docs/patches.md")
        replaces = data.get("replaces", {})
        if not isinstance(replaces, dict) or not all(
                isinstance(v, str) and re.match(r"^[0-9a-f]{40}$", v) for v in replaces.values()):
            raise UsageError(f"{manifest_path}: [replaces] must map tree paths to 40-hex blob ids",
                             hint="see docs/patches.md")
        for k in replaces:
            relpath(k, "[replaces]", str(manifest_path), under=PATCH_ROOT)
    if not overlay_dir.is_dir():
        return files, replaces
    for dirpath, dirnames, filenames in os.walk(overlay_dir):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            rel = p.relative_to(overlay_dir).as_posix()
            if rel == OVERLAY_MANIFEST or fn == ".gitkeep" or "__pycache__" in p.parts or fn.endswith(".pyc"):
                continue
            relpath(rel, "overlay", "overlay/", under=PATCH_ROOT)
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                raise UsageError(f"overlay/{rel}: not a regular file (symlinks are refused)",
                                 hint="put the file itself in overlay/")
            files.append(OverlayFile(rel=rel, path=p, executable=bool(st.st_mode & 0o111),
                                     replaces=replaces.get(rel)))
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise UsageError(f"overlay/{Path(dirpath, d).relative_to(overlay_dir).as_posix()}: "
                                 "a symlinked directory is refused", hint="put the files themselves in overlay/")
    stale = sorted(set(replaces) - {f.rel for f in files})
    if stale:
        raise UsageError(f"{manifest_path}: [replaces] names {stale[0]!r}, which is not in overlay/",
                         hint="remove the entry or add the file")
    files.sort(key=lambda f: f.rel)
    return files, replaces


def load(root, strict=True):
    """Read and validate patches/ and overlay/ under ``root``.  With
    ``strict``, a metadata problem (lint) is a UsageError."""
    root = Path(root).resolve()
    names = read_series(root / "patches")
    patches = [parse_patch(root / "patches" / n, i) for i, n in enumerate(names, 1)]
    if strict:
        for p in patches:
            problems = lint(p)
            if problems:
                field, message, hint = problems[0]
                raise UsageError(message, hint=hint)
    overlay, replaces = read_overlay(root / "overlay")
    return Stack(root=root, patches=patches, overlay=overlay, digest=stack_digest(patches, overlay))


def stack_digest(patches, overlay):
    """What identifies a stack's result: each patch's name and normalized
    bytes in order, then each overlay file's path, mode, recorded
    replacement and bytes."""
    h = hashlib.sha256()
    for p in patches:
        h.update(b"patch\0" + p.name.encode() + b"\0")
        data = normalized(p.raw)
        h.update(b"%d\0" % len(data) + data)
    for o in overlay:
        data = o.path.read_bytes()
        h.update(b"overlay\0" + o.rel.encode() + (b"\0x\0" if o.executable else b"\0-\0")
                 + (o.replaces or "").encode() + b"\0%d\0" % len(data) + data)
    return h.hexdigest()


def without(stack, name):
    """``stack`` less the patch ``name``: the others in order, renumbered
    from 1, the same overlay, and its own digest (a build of it is never
    taken for the whole stack's).  UsageError if the series lacks ``name``."""
    names = [p.name for p in stack.patches]
    if name not in names:
        raise UsageError(f"{name!r} is not in the series ({len(names)} patch(es) in patches/series)",
                         hint="name a patch file listed in patches/series")
    kept = [dataclasses.replace(p, index=i) for i, p in enumerate((p for p in stack.patches if p.name != name), 1)]
    return dataclasses.replace(stack, patches=kept, digest=stack_digest(kept, stack.overlay))
