"""The port session's end: the new patches/ (a topic port: its port
folder) staged with the range-diff, then put in place with the lock so
that a kill at any instant leaves each whole (``roll_forward``, judged by
``decisions.finish_steps`` from the digests alone)."""
import dataclasses
import os
import shutil

from ... import builder, gitcmd, series
from ...errors import IntegrityError
from .. import ports, ranges
from ..lint import lint, lint_series
from ..refresh import Change, change_of, compare, stage_patches
from ..texts import add_trailers, format_patch
from .decisions import Put, Refusal, finish_steps, port_mails, work_of
from .gitfacts import lines_of, parse_range_diff, range_diff
from .report import Report
from .state import Outcome, Phase, Staged
from . import store
from .store import atomic_write, dir_digest, file_digest

def finish(places, s, stack, say):
    """Every patch done: stage the new patches/ (a topic port: its port
    folder), then put it (and the lock) in place."""
    s = (stage_port if s.topic else stage_end)(places, s, stack, say)
    s = store.save(places, dataclasses.replace(s, phase=Phase.FINISHING))
    return roll_forward(places, s, say)


def _carried(places, s):
    """The commits the session carries; they must be the tree's commits
    since the session's base."""
    carried = [c for r in s.results for c in r.commits]
    in_tree = lines_of(gitcmd.out(places.tree, "rev-list", "--reverse", f"{s.base}..HEAD"))
    if list(in_tree) != [c.commit for c in carried]:
        raise IntegrityError(f"{places.tree}: {s.base[:12]}..HEAD holds {len(in_tree)} commit(s), the session "
                             f"recorded {len(carried)}: the tree changed behind the session's back",
                             hint=f"put HEAD back at {s.head[:12]} (git reset --hard), or --abort")
    return carried


def _fresh_stage(places):
    if places.stage.exists():
        shutil.rmtree(places.stage)
    places.stage.mkdir()


def _with_range_diff(places, s, staged, changes, keep=None):
    """The session with what it staged and its range-diff (written to
    build/port/range-diff.txt; ``keep``: the old patches' indices whose
    pairs are kept, pairs with a new commit always are)."""
    text = range_diff(places.tree, s.base)
    atomic_write(places.range_diff, text)
    pairs = tuple(rd for rd in parse_range_diff(text) if keep is None or rd.new is not None or rd.old in keep)
    return dataclasses.replace(s, staged=Staged(dir_digest(staged), s.new_lock_digest or s.lock_digest,
                                                tuple(changes)), range_diff=pairs)


def stage_end(places, s, stack, say):
    """The new patches/ in build/port/stage/patches (the refresh logic: a
    file rewritten only where its change or message changed), checked, and
    the range-diff; returns the session with them (not yet saved)."""
    tree = places.tree
    carried = _carried(places, s)
    say(f"re-exporting {len(carried)} patch(es)")
    old = {p.name: p for p in stack.patches}
    texts, changes = {}, []
    for c in carried:
        text, change = compare(tree, c.commit, old.get(c.name))
        changes.append((c.name, change))
        if change is not Change.UNCHANGED:
            texts[c.name] = text
    removed = [r.patch for r in s.results if not r.commits]
    changes += [(n, Change.REMOVED) for n in removed]
    notes = {r.patch: f"dropped on {s.label}: {r.patch}: {r.reason}" for r in s.results if not r.commits}
    _fresh_stage(places)
    stage_patches(places.patches, places.staged_patches, texts, [c.name for c in carried], removed, notes)
    problems = lint_series(series.load(places.stage, strict=False).patches)
    if problems:       # every commit was checked when it was taken (_commit_problems): not expected
        raise IntegrityError(f"the ported series staged in {places.stage} has {len(problems)} lint finding(s), "
                             f"first: {problems[0]['error']}", hint="please report this; --abort leaves "
                                                                     "patches/ and upstream.lock as they are")
    return _with_range_diff(places, s, places.staged_patches, changes)


def _series_header(s):
    lines = [f"# Topic {s.topic} ported to SGLang {s.label} (tools/stack.py port --topic {s.topic}).",
             "# One git format-patch mail a line, applied in this order with git am."]
    lines += [f"# It applies on {ports.PORTS.as_posix()}/{s.label}/{t}/ (Requires: {t})." for t, _ in s.requires]
    return "\n".join(lines) + "\n"


def stage_port(places, s, stack, say):
    """A topic port's end, staged in build/port/stage/port: the series
    (the old one's comments kept; a '# not ported: X.patch -- why' for each
    pinned patch skipped or left behind) and the mails (``port_mails``; a
    file rewritten only where its change or message changed); and the
    range-diff of the pinned patches against the port patches."""
    tree = places.tree
    carried = _carried(places, s)
    say(f"writing {len(carried)} port patch(es) for {s.target}")
    d = places.port(s)
    old = ports.load(d) if (d / "series").is_file() else None
    mine = work_of(s, stack)
    by = [(r.patch, c) for r in s.results for c in r.commits]
    olds = {q.name: q for q in (old.patches if old else ())}
    texts, changes, names = {}, [], []
    for (file, add), (_, c) in zip(port_mails(s, stack, by, old), by):
        text = add_trailers(format_patch(tree, c.commit), add)
        change = change_of(text, olds.get(file))
        names.append(file)
        changes.append((file, change))
        if change is not Change.UNCHANGED:
            texts[file] = text
    removed = [n for n in olds if n not in names]
    changes += [(n, Change.REMOVED) for n in removed]
    _fresh_stage(places)
    if old is None:
        skeleton = places.stage / "skeleton"
        skeleton.mkdir()
        (skeleton / "series").write_text(_series_header(s))
    dest = stage_patches(old.dir if old else skeleton, places.staged_port, texts, names, removed)
    if old is None:
        shutil.rmtree(skeleton)
    series_file = dest / "series"
    text = ports.with_not_ported(series_file.read_text(), [(r.patch, r.reason) for r in s.results if not r.commits])
    if s.label.startswith("v"):          # a release: a new line says the range it was made for (docs/stack.md)
        text = ranges.with_ranges(text, f">={s.label[1:]}", new=old is None)
    series_file.write_text(text)
    return _with_range_diff(places, s, dest, changes, keep={p.index for p in mine})


def swap_patches(places, s=None):
    """patches/ (a topic port: its port folder) becomes the staged one (one
    rename exchange, or one rename where there was none; the old one lands
    in the stage)."""
    if s is not None and s.topic:
        dest = places.port(s)
        dest.parent.mkdir(parents=True, exist_ok=True)
        builder.swap_into_place(places.staged_port, dest, places.stage / "port.old")
        return
    builder.swap_into_place(places.staged_patches, places.patches, places.stage / "patches.old")


def replace_lock(places):
    os.replace(places.new_lock, places.lock)


def roll_forward(places, s, say):
    """Put the staged end in place, as far as it is not yet (finish_steps)."""
    if s.topic:
        steps = finish_steps(s, dir_digest(places.port(s)), file_digest(places.lock),
                             dir_digest(places.staged_port), s.lock_digest)
    else:
        steps = finish_steps(s, dir_digest(places.patches), file_digest(places.lock),
                             dir_digest(places.staged_patches), file_digest(places.new_lock))
    if isinstance(steps, Refusal):
        raise steps.error()
    for step in steps:
        if step is Put.SWAP_PATCHES:
            say(f"{s.target}: the ported series in place")
            swap_patches(places, s)
        else:
            say(f"upstream.lock: v{s.onto}")
            replace_lock(places)
    s = store.save(places, dataclasses.replace(s, phase=Phase.DONE))
    return Report(Outcome.FINISHED, places, s, lint=tuple(lint(places.root)))
