"""Refresh: regenerate patches/ from the commits of an edited build tree,
rewriting only the patches whose change or message changed."""
import dataclasses
import enum
import shutil
from pathlib import Path

from .. import builder, gitcmd, locking, series
from ..errors import FAILED, OK, UsageError
from .json_form import Result, hidden, optional
from .texts import format_patch, noise_free, slug


class Change(enum.StrEnum):
    """What a re-export does to one patch file (its value is the report's word)."""
    ADDED = "added"
    REWRITTEN = "rewritten"
    REMOVED = "removed"
    UNCHANGED = "unchanged"


class RefreshStatus(enum.StrEnum):
    CHANGES = "changes"        # a patch file or the series changes (or would, with --check)
    CLEAN = "clean"            # patches/ is what the tree's commits give


@dataclasses.dataclass(frozen=True)
class Refreshed(Result):
    """One patch file a refresh writes (or would write), or removes."""
    patch: str
    change: Change
    commit: str | None = optional()        # the tree's commit it comes from (None: removed)


@dataclasses.dataclass(frozen=True)
class RefreshReport(Result):
    """``refresh``: what the tree's commits change in patches/."""
    status: RefreshStatus
    changes: tuple             # Refreshed, in series order, then the removed files
    series_changed: bool       # the series file lists other names or another order
    patches: tuple             # the new series' names
    checked: bool = hidden(False)    # --check: nothing was written

    @property
    def exit_code(self):
        """0 refreshed (or nothing to change); 1 --check found changes."""
        return FAILED if self.checked and self.status is RefreshStatus.CHANGES else OK


def _rewrite_series(patches_dir, names, notes=None):
    """Keep the series file's comment blocks; list ``names`` in order.  A
    name new to the series goes right after the line of the name before it
    in ``names``; the line of an entry that leaves becomes the comment
    ``# NOTE`` where ``notes`` has one for it, else goes."""
    notes = notes or {}
    path = patches_dir / "series"
    old = path.read_text().splitlines()
    present = series.read_series(patches_dir) if path.exists() else []
    if names == present and not notes:
        return False
    keep = set(names)
    out, placed = [], set()
    for line in old:
        entry = line.split("#", 1)[0].strip()
        if entry and entry not in keep:
            if entry in notes:
                out.append("# " + " ".join(notes[entry].split()))
            continue
        if entry:
            placed.add(entry)
        out.append(line)
    for i, n in enumerate(names):
        if n in placed:
            continue
        before = next((names[j] for j in range(i - 1, -1, -1) if names[j] in placed), None)
        at = next((k + 1 for k, l in enumerate(out) if l.split("#", 1)[0].strip() == before), None) \
            if before else None
        if at is None:      # first in the series: before the first entry, else at the end
            at = next((k for k, l in enumerate(out) if l.split("#", 1)[0].strip()), len(out))
        out.insert(at, n)
        placed.add(n)
    # put entries back in the new order, in the slots entries occupy (each line with its own comment,
    # e.g. its applies: range)
    slots = [i for i, l in enumerate(out) if l.split("#", 1)[0].strip()]
    line_of = {out[i].split("#", 1)[0].strip(): out[i] for i in slots}
    for i, n in zip(slots, names):
        out[i] = line_of.get(n, n)
    path.write_text("\n".join(out) + "\n")
    return True


def check_tree(tree) -> None:
    """Refuse (exit 2, before any work) a ``--tree`` that is not a tree the builder made: no such
    folder, or no ``upstream`` and ``patched`` branches in it."""
    hint = ("give the folder `python tools/apply.py --out DIR` built (build/sglang by default), "
            "or leave --tree out to refresh from a fresh build of the stack")
    if not Path(tree).is_dir():
        raise UsageError(f"--tree {tree}: no such folder", hint=hint)
    for branch in ("upstream", "patched"):
        if gitcmd.commit_of(tree, f"refs/heads/{branch}") is None:
            raise UsageError(f"--tree {tree}: not a tree the builder made (no branch '{branch}' in it)", hint=hint)


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


def compare(tree, commit, old):
    """``(text, Change)``: commit ``commit`` of ``tree`` as a mail, and what
    writing it over patch ``old`` (a series.Patch, None for a new patch)
    changes: the file is rewritten only when its change or message changed
    (noise_free)."""
    text = format_patch(tree, commit)
    return text, change_of(text, old)


def change_of(text, old):
    """What writing mail ``text`` over patch ``old`` (None: none) changes,
    modulo noise."""
    if old is None:
        return Change.ADDED
    return Change.UNCHANGED if noise_free(text) == noise_free(old.raw.decode()) else Change.REWRITTEN


def refresh(root, tree, write=True):
    """Regenerate patches/ from the commits of ``tree``.  A patch file is
    rewritten only when its change or message changed."""
    root = Path(root)
    stack = series.load(root, strict=False)
    by_subject = {p.subject: p for p in stack.patches}
    commits = tree_commits(tree)
    names, changes, texts = [], [], {}
    for i, (c, subject) in enumerate(commits):
        old = stack.patches[i] if i < len(stack.patches) and stack.patches[i].subject == subject else \
            by_subject.get(subject)
        name = old.name if old else slug(subject) + ".patch"
        names.append(name)
        text, change = compare(tree, c, old)
        if change is Change.UNCHANGED:
            continue
        changes.append(Refreshed(name, change, c))
        if write:
            texts[name] = text
    removed = [p.name for p in stack.patches if p.name not in names]
    changes += [Refreshed(n, Change.REMOVED) for n in removed]
    order_changed = names != [p.name for p in stack.patches if p.name in names] or bool(removed) or \
        any(c.change is Change.ADDED for c in changes)
    if write and (texts or order_changed):
        write_patches(root, texts, names if order_changed else None, removed)
    status = RefreshStatus.CHANGES if changes or order_changed else RefreshStatus.CLEAN
    return RefreshReport(status, tuple(changes), order_changed, tuple(names), checked=not write)


def stage_patches(patches, dest, texts, series_names=None, removed=(), notes=None):
    """A copy of the folder ``patches`` at ``dest`` (which must not exist),
    changed: the series lists ``series_names`` (None: as it is; ``notes``:
    _rewrite_series), the files of ``texts`` written, those of ``removed``
    deleted."""
    shutil.copytree(patches, dest, symlinks=True)
    if series_names is not None:
        _rewrite_series(dest, series_names, notes)
    for name, text in texts.items():
        (dest / name).write_text(text)
    for n in removed:
        (dest / n).unlink(missing_ok=True)
    return dest


def write_patches(root, texts, series_names=None, removed=()):
    """Change patches/ as one step: a copy is changed beside it
    (``.patches.tmp-*``) and swapped into place with one rename exchange,
    so a run killed at any moment leaves either the old patches/ or the new
    one, never a mix.  The caller holds the series lock."""
    patches = Path(root) / "patches"
    tmp, mark = locking.fresh_scratch(root, ".patches.tmp-")
    try:
        new = stage_patches(patches, tmp / "patches", texts, series_names, removed)
        builder.swap_into_place(new, patches, tmp / "old")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        mark.release()
