"""The port session's verbs: ``start`` (the whole stack onto a release),
``start_topic`` (one topic onto a release or a commit), ``continue_``,
``skip``, ``abort``, ``status``; each goes as far as git can
(``_advance``) and returns a ``Report``."""
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from ... import clones, gitcmd, lock as lockmod, locking, series
from ...errors import IntegrityError, UsageError
from .. import ports
from ..classify import LEAVES_SERIES
from ..export import apply_required
from ..lint import lint, lint_series
from ..rebase import OLD, REUSED, attempt, merged_upstream, new_lock, prepare_tree
from ..texts import format_patch
from .decisions import (Act, Refusal, Step, after_attempt, continue_step, leaves_reason, name_commits, place_of,
                        skip_step, some_files, work_of)
from .end import finish, roll_forward
from .gitfacts import am_in_progress, configure_rerere, facts, record_resolutions, uncommitted
from .report import Report
from .state import Carried, Outcome, PatchResult, Phase, Resolution, Session, Stop
from . import store
from .store import Places, dir_digest, file_digest, load, remove_session, write_state


def _check_unchanged(places, s):
    """patches/ and the lock must be what the session started from."""
    for what, now, then in (("patches/", dir_digest(places.patches), s.patches_digest),
                            ("upstream.lock", file_digest(places.lock), s.lock_digest)):
        if now != then:
            raise UsageError(f"{what} of {places.root} changed since the port session started (the session "
                             "recorded it in build/port/session.json): its end would overwrite that change",
                             hint=f"put {what} back as it was (e.g. git checkout -- {what.rstrip('/')}), or "
                                  "--abort and start again")


def _clear(places, shown, tool):
    """No session may be running there (a finished one is removed: its
    results are in place already)."""
    refuse_running(places.root, shown, tool)
    if places.session.exists():
        remove_session(places)


def refuse_running(root, shown=str, tool="python tools/stack.py port"):
    """Refuse (exit 2) when an unfinished session is in ``root``'s build/port;
    nothing is removed here."""
    places = Places(Path(root))
    if places.session.exists():
        s = load(places)
        if s.phase is not Phase.DONE:
            what = f"a topic port of {s.topic} onto {s.label}" if s.topic else f"a port session onto {s.label}"
            raise UsageError(f"{what} is already in {shown(places.session)} (phase {s.phase})",
                             hint=f"{tool} --continue takes it on, {tool} --status shows it, {tool} --abort "
                                  "removes it")


def _linted_stack(places):
    problems = lint(places.root)
    if problems:
        raise UsageError(f"patches/ has {len(problems)} lint finding(s), first: {problems[0]['error']}",
                         hint="fix them (tools/stack.py lint lists them) and commit, then start the port")
    return series.load(places.root)


def _refuse_uncommitted(places, paths, writes):
    dirty = uncommitted(places.root, paths)
    if dirty:
        raise UsageError(f"uncommitted changes in {some_files(dirty)}: the port's end rewrites {writes}",
                         hint="commit them (or stash them) first, so that the port's result "
                              "is one reviewable change")


def _open(places, lock, stack, onto, cache, progress, bare, make):
    """The session folder, made whole beside build/port and renamed into
    place: the tree ``prepare_tree`` gives (rerere on), then
    ``make(scratch, tree, base)`` returns the Session (writing any file of
    its own into the scratch folder)."""
    build = places.session.parent
    build.mkdir(parents=True, exist_ok=True)
    for leftover in build.glob(".port-removed-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp, mark = locking.fresh_scratch(build, ".port.tmp-", what="an unfinished port session start; safe to delete")
    try:
        tree = tmp / "tree"
        base = prepare_tree(lock, stack, onto, tree, cache, progress, bare)
        configure_rerere(tree, places)
        s = make(tmp, tree, base)
        write_state(tmp / places.state.name, s)
        mark.release()
        (tmp / locking.MARK).unlink(missing_ok=True)
        os.rename(tmp, places.session)
    finally:
        mark.release()
        shutil.rmtree(tmp, ignore_errors=True)
    return s


def start(root, onto, cache=None, progress=None, shown=str, tool="python tools/stack.py port"):
    """Start a session onto release ``onto`` (a rebase.Onto), and go as far
    as git can."""
    say = progress or (lambda m: None)
    places = Places(Path(root))
    _clear(places, shown, tool)
    if not onto.version:
        raise UsageError(f"port --onto {onto.label}: a port session ends by pinning a release, and "
                         f"{onto.label!r} is not a release version",
                         hint="give a release (e.g. --onto 0.5.17); for a commit, "
                              "tools/stack.py check --against COMMIT --repo URL shows what breaks, and "
                              "port --topic T --onto COMMIT --repo URL ports one topic onto it")
    lock = lockmod.load(places.lock)
    stack = _linted_stack(places)
    _refuse_uncommitted(places, ("patches", "upstream.lock"), "patches/ and upstream.lock")
    repo = onto.repo or lock.repo
    bare = clones.fresh_clone(repo, cache, progress)[0]
    say(f"computing and verifying the lock for v{onto.version} (tag in {repo})")
    new = new_lock(lock, onto, cache, progress, bare)

    def make(tmp, tree, base):
        lockmod.write(new, tmp / places.new_lock.name, like=places.lock)
        return Session(onto=onto.version, repo=repo, old_version=lock.version, lock_digest=file_digest(places.lock),
                       patches_digest=dir_digest(places.patches),
                       new_lock_digest=file_digest(tmp / places.new_lock.name), new_base=base["base_commit"],
                       merged=merged_upstream(stack, onto, lock, bare), phase=Phase.APPLYING,
                       head=gitcmd.head(tree))

    s = _open(places, lock, stack, onto, cache, progress, bare, make)
    say(f"session in {shown(places.session)}: {len(stack.patches)} patch(es) onto v{onto.version}")
    return _advance(places, s, stack, say, shown, tool)


def _refuse_replacing(places, label, topic, replace, tool):
    """A topic port onto a label that already has that topic's port series
    replaces it: refused (exit 2, before any work) without ``replace``."""
    have = places.root / ports.PORTS / label / topic
    if (have / "series").is_file() and not replace:
        n = len(series.read_series(have))
        raise UsageError(f"port --topic {topic}: {(ports.PORTS / label / topic).as_posix()}/ already holds a port "
                         f"series ({n} patch(es)); this session would replace it",
                         hint=f"verify that one: tools/stack.py export --topic {topic} --onto {label.lstrip('v')} "
                              f"--check; to replace it: {tool} --topic {topic} --onto ... --replace")


def start_topic(root, topic, onto, cache=None, progress=None, shown=str, tool="python tools/stack.py port",
                replace=False):
    """Start a topic port: the pinned topic's patches onto ``onto`` (a
    release, through its verified artifact, or a commit of ``onto.repo``),
    on the port series they require, ending in
    ``patches/ports/<label>/<topic>/``; the pin is never written."""
    say = progress or (lambda m: None)
    places = Places(Path(root))
    _clear(places, shown, tool)
    lock = lockmod.load(places.lock)
    stack = _linted_stack(places)
    mine = [p for p in stack.patches if p.topic == topic]
    if not mine:
        topics = ", ".join(dict.fromkeys(p.topic for p in stack.patches)) or "none"
        raise UsageError(f"port --topic {topic}: no patch of {places.patches / 'series'} has Topic: {topic}",
                         hint=f"give a topic of the pinned stack: {topics}")
    bare = clones.fresh_clone(onto.repo, cache, progress)[0] if onto.repo else None
    label = ports.label_of(onto) if onto.version else None
    if label:
        _refuse_replacing(places, label, topic, replace, tool)
        _refuse_uncommitted(places, ((ports.PORTS / label / topic).as_posix(),), "that port folder")
        need = _required(places.root / ports.PORTS / label, topic, mine)

    def make(tmp, tree, base):
        nonlocal label, need
        if label is None:           # a commit: an existing folder named by a prefix of it, else its 12 digits
            full = base["base_commit"]
            have = ports.label_dirs(places.root, dataclasses.replace(onto, commit=full))
            label = have[0].name if have else full[:12]
            _refuse_replacing(places, label, topic, replace, tool)
            _refuse_uncommitted(places, ((ports.PORTS / label / topic).as_posix(),), "that port folder")
            need = _required(places.root / ports.PORTS / label, topic, mine)
        rel = (ports.PORTS / label / topic).as_posix()
        required = apply_required(places.root / ports.PORTS / label, need, topic, rel, tree, say)
        head = gitcmd.head(tree)
        return Session(onto=onto.version or onto.commit, repo=onto.repo or "", old_version=lock.version,
                       lock_digest=file_digest(places.lock), patches_digest=dir_digest(places.patches),
                       new_lock_digest="", new_base=base["base_commit"],
                       merged=merged_upstream(stack, onto, lock, bare), phase=Phase.APPLYING, head=head,
                       topic=topic, ports_label=label, base=head, requires=tuple(required),
                       ports_digest=dir_digest(places.root / rel))

    s = _open(places, lock, stack, onto, cache, progress, bare, make)
    on = "".join(f" on the {t} port ({n})" for t, n in s.requires)
    say(f"session in {shown(places.session)}: topic {topic}, {len(mine)} patch(es) onto {s.label}{on}, "
        f"to {s.target}")
    return _advance(places, s, stack, say, shown, tool)


def _required(label_dir, topic, mine):
    """The topics whose port series the topic port applies on: the
    ``Requires:`` of its port series there (if any), then of its pinned
    patches; each must have a series in ``label_dir`` (else exit 2)."""
    have = label_dir / topic
    names = ports.requires(ports.load(have)) if (have / "series").is_file() else []
    names += ports.requires(ports.PortSeries(have, label_dir.name, topic, mine))
    names = list(dict.fromkeys(names))
    for t in names:
        if t == topic or not (label_dir / t / "series").is_file():
            raise UsageError(f"port --topic {topic}: it requires the {t} port ('Requires: {t}'), and "
                             f"{label_dir / t} holds no series",
                             hint=f"port {t} first (tools/stack.py port --topic {t} --onto ...), or correct "
                                  "the Requires: trailer")
    return names


def _advance(places, s, stack, say, shown, tool):
    """Apply the remaining patches until one needs the person, then the end."""
    tree = places.tree
    total = len(stack.patches)
    todo = work_of(s, stack)
    while len(s.results) < len(todo):
        p = todo[len(s.results)]
        at = f"{len(s.results) + 1}/{len(todo)}"
        a = attempt(tree, p, total, s.merged.get(p.name), keep_conflict=True)
        reused = tuple(REUSED.findall(a.git_am)) if a.stopped else ()
        f = facts(tree, "HEAD") if a.stopped else None
        step = after_attempt(a, f, reused)
        result = None
        if step is Step.REUSE:
            if gitcmd.am_continue(tree).returncode == 0:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.RERERE,
                                     (Carried(p.name, gitcmd.head(tree), p.subject),))
                say(f"patch {at} {p.name}: {a.status}, resolution reused (rerere): "
                    f"{some_files(reused)}")
            else:
                step = Step.STOP
        if step is Step.STOP:
            stop = Stop(p.index, p.name, p.subject, a.status, s.head, a.stopped, a.conflicted,
                        reused if a.stopped else (), a.failure, a.git_am,
                        gitcmd.out(tree, "rev-parse", f"{OLD}~{total - p.index}"))
            s = store.save(places, dataclasses.replace(s, phase=Phase.STOPPED, stop=stop))
            say(f"patch {at} {p.name}: {a.status}, stopped for you")
            return Report(Outcome.STOPPED, places, s, facts(tree, s.head) if a.stopped else None)
        if result is None:
            if a.status in LEAVES_SERIES:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.GIT, (), leaves_reason(a),
                                     a.upstream_commit or "")
                say(f"patch {at} {p.name}: {a.status}, leaves the series ({result.reason})")
            else:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.GIT,
                                     (Carried(p.name, gitcmd.head(tree), p.subject),))
                say(f"patch {at} {p.name}: {a.status}")
        s = store.save(places, dataclasses.replace(s, results=s.results + (result,),
                                             head=gitcmd.head(tree)))
    return finish(places, s, stack, say)


def _reconcile(places, s):
    """A run killed while applying: the tree back at the last recorded patch."""
    tree = places.tree
    if am_in_progress(tree):
        gitcmd.am_abort(tree)
    gitcmd.reset_hard(tree, s.head)


def continue_(root, cache=None, progress=None, shown=str, tool="python tools/stack.py port"):
    say = progress or (lambda m: None)
    places = Places(Path(root))
    s = load(places)
    if s.phase is Phase.DONE:
        return Report(Outcome.FINISHED, places, s, note=f"the port onto {s.label} had already finished")
    if s.phase is Phase.FINISHING:
        say("completing the finish of a run that was stopped while finishing")
        return roll_forward(places, s, say)
    _check_unchanged(places, s)
    stack = series.load(places.root)
    if s.phase is Phase.APPLYING:
        say(f"resuming after patch {len(s.results)}/{len(work_of(s, stack))}")
        _reconcile(places, s)
        return _advance(places, s, stack, say, shown, tool)
    stop, tree = s.stop, places.tree
    tree_shown = shown(tree)
    f = facts(tree, stop.head)
    act = continue_step(stop, f, tree_shown)
    if isinstance(act, Refusal):
        raise act.error()
    if f.untracked:
        say(f"note: untracked files in {tree_shown}, part of no patch: {some_files(f.untracked)}")
    commits = f.commits
    if act is Act.AM_CONTINUE:
        record_resolutions(tree)
        p = gitcmd.am_continue(tree)
        if p.returncode:
            raise UsageError(f"{stop.patch}: git am --continue in {tree_shown} failed: "
                             f"{(p.stderr or p.stdout).strip()[:500]}",
                             hint="finish it there yourself (git am --continue, or commit), then --continue")
        commits = facts(tree, stop.head).commits
    named = name_commits(stop.patch, stop.subject, commits, _taken(s, stack))
    if isinstance(named, Refusal):
        raise named.error()
    bad = _commit_problems(tree, named, tree_shown, s)
    if bad:
        raise bad.error()
    if act is Act.AM_QUIT:
        record_resolutions(tree)               # the committed resolution, for the next run of this move
        gitcmd.am_quit(tree)
    result = PatchResult(stop.patch, stop.index, stop.subject, stop.status, Resolution.PERSON, named)
    extra = [c.name for c in named if c.name != stop.patch]
    say(f"patch {place_of(s, stack, stop.index)} {stop.patch}: resolved by you"
        + (f"; new patch(es) after it: {', '.join(extra)}" if extra else ""))
    s = store.save(places, dataclasses.replace(s, phase=Phase.APPLYING, stop=None, results=s.results + (result,),
                                         head=gitcmd.head(tree)))
    return _advance(places, s, stack, say, shown, tool)


def _commit_problems(tree, carried, label, s):
    """Every commit's mail must be a patch the series accepts (python/
    paths, test/ too for a topic port's, the headers, a body,
    Upstream-Status and Topic)."""
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-port-") as t:
        for c in carried:
            f = Path(t) / c.name
            f.write_text(format_patch(tree, c.commit))
            where = f"commit {c.commit[:12]} ({c.subject!r}, to be {s.target}{c.name})"
            try:
                p = series.parse_patch(f, 1, where=where, roots=series.PORT_ROOTS if s.topic else
                                       (series.PATCH_ROOT,))
            except UsageError as e:
                return Refusal(e.message, f"{e.hint}; change the commit in {label} (git commit --amend, or "
                                          "git rebase -i), then --continue")
            problems = lint_series([p])
            if problems:
                first = problems[0]
                return Refusal(f"{where}: {first['error']}",
                               f"{first['hint']}: in that commit, e.g. git -C {label} commit --amend "
                               "(git rebase -i for an earlier one), then --continue")
    return None


def _taken(s, stack):
    return {p.name for p in stack.patches} | {c.name for r in s.results for c in r.commits}


def skip(root, reason, cache=None, progress=None, shown=str, tool="python tools/stack.py port"):
    say = progress or (lambda m: None)
    reason = " ".join((reason or "").split())
    if not reason:
        raise UsageError("--skip needs --reason TEXT: why the patch is no longer needed (it is recorded in "
                         "patches/series, or as '# not ported: X.patch -- TEXT' in a topic port's series)",
                         hint='e.g. --skip --reason "upstream does this since #24692"')
    places = Places(Path(root))
    s = load(places)
    if s.phase is not Phase.STOPPED:
        raise UsageError(f"no patch is stopped: the port session onto {s.label} is {s.phase}",
                         hint=f"{tool} --status shows it; --skip drops the patch a stop waits on")
    _check_unchanged(places, s)
    stack = series.load(places.root)
    stop, tree = s.stop, places.tree
    refusal = skip_step(stop, facts(tree, stop.head), shown(tree))
    if refusal:
        raise refusal.error()
    if am_in_progress(tree):
        gitcmd.am_abort(tree)
    gitcmd.reset_hard(tree, stop.head)
    result = PatchResult(stop.patch, stop.index, stop.subject, stop.status, Resolution.SKIPPED, (), reason)
    say(f"patch {place_of(s, stack, stop.index)} {stop.patch}: skipped ({reason})")
    s = store.save(places, dataclasses.replace(s, phase=Phase.APPLYING, stop=None, results=s.results + (result,),
                                         head=stop.head))
    return _advance(places, s, stack, say, shown, tool)


def abort(root, progress=None, shown=str, tool="python tools/stack.py port"):
    places = Places(Path(root))
    try:
        s = load(places)
    except IntegrityError:
        s = None                                   # a damaged state: removing it is all that is left
    if s is not None and s.phase is Phase.FINISHING:
        raise UsageError(f"the port session onto {s.label} is putting the new "
                         f"{s.target if s.topic else 'patches/ and upstream.lock'} in place (phase finishing): "
                         "aborting now could leave " + ("it half new" if s.topic else "one new and one old"),
                         hint=f"{tool} --continue completes it (then git can take the checkout back)")
    if places.tree.is_dir() and am_in_progress(places.tree):
        record_resolutions(places.tree)           # what was resolved so far is kept for the next run
    remove_session(places)
    if s is not None and s.phase is Phase.DONE:
        note = f"the finished session onto {s.label} was removed; " + \
            (f"{s.target} is the ported series" if s.topic else "patches/ and upstream.lock are the ported ones")
    else:
        note = (f"{s.target}, " if s is not None and s.topic else "") + "patches/ and upstream.lock are as " \
            f"they were; recorded resolutions stay in {shown(places.rr_cache)}"
    return Report(Outcome.ABORTED, places, None, note=note)


def status(root, progress=None, shown=str, tool="python tools/stack.py port"):
    say = progress or (lambda m: None)
    places = Places(Path(root))
    s = load(places)
    if s.phase is Phase.FINISHING:
        say("completing the finish of a run that was stopped while finishing")
        return roll_forward(places, s, say)
    if s.phase is Phase.DONE:
        return Report(Outcome.FINISHED, places, s)
    if s.phase is Phase.STOPPED:
        return Report(Outcome.STOPPED, places, s, facts(places.tree, s.stop.head))
    return Report(Outcome.IN_PROGRESS, places, s, note=f"a run stopped while applying: {tool} --continue resumes")


