"""Refresh: regenerate patches/ from the commits of an edited build tree,
rewriting only the patches whose change or message changed."""
import shutil
from pathlib import Path

from .. import builder, gitcmd, locking, series
from .texts import format_patch, noise_free, slug


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
    names, changes, texts = [], [], {}
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
            texts[name] = text
    removed = [p.name for p in stack.patches if p.name not in names]
    changes += [{"patch": n, "change": "removed"} for n in removed]
    order_changed = names != [p.name for p in stack.patches if p.name in names] or bool(removed) or \
        any(c["change"] == "added" for c in changes)
    if write and (texts or order_changed):
        write_patches(root, texts, names if order_changed else None, removed)
    return {"changes": changes, "series_changed": order_changed, "patches": names}


def write_patches(root, texts, series_names=None, removed=()):
    """Change patches/ as one step: a copy is changed beside it
    (``.patches.tmp-*``) and swapped into place with one rename exchange,
    so a run killed at any moment leaves either the old patches/ or the new
    one, never a mix.  The caller holds the series lock."""
    patches = Path(root) / "patches"
    tmp, mark = locking.fresh_scratch(root, ".patches.tmp-")
    try:
        new = tmp / "patches"
        shutil.copytree(patches, new, symlinks=True)
        if series_names is not None:
            _rewrite_series(new, series_names)
        for name, text in texts.items():
            (new / name).write_text(text)
        for n in removed:
            (new / n).unlink(missing_ok=True)
        builder.swap_into_place(new, patches, tmp / "old")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        mark.release()
