"""The patch stack's lifecycle.

  python tools/stack.py rebase --onto VERSION|COMMIT [--repo URL] [--write]
        apply the stack onto a newer upstream and classify every patch
        (applied, applied-3way, conflict, merged-upstream, probably-upstream,
        emptied; ported where patches/ports/<label>/ carries it); --write
        updates upstream.lock and the patches, only when every patch is
        resolved
  python tools/stack.py check --against VERSION|COMMIT [--repo URL]
        which patch breaks on that upstream; changes nothing
  python tools/stack.py refresh [--tree build/sglang] [--check]
        regenerate patches/ from the tree's commits; a file is rewritten only
        when its change or message changed; --check exits 1 if anything would
        change (without --tree: the stack is built and re-exported, which must
        reproduce patches/ exactly)
  python tools/stack.py export --topic T [--onto VERSION|COMMIT] [--out DIR]
        [--test-python PY] [--pinned] [--no-tests] [--check]
        the topic alone on the newest (or given) upstream, verified to apply
        and to pass tests/T there, as numbered mails + pull-request.md; with a
        ported series (patches/ports/<label>/T/) that series, strict git am,
        every patch's Evidence: tests run before/after it and the
        upstream-style tests on pristine/patched, results in pull-request.md
        (--pinned: the pinned patches even so; --check: all of it, nothing
        written, also for a topic marked Inappropriate, which export refuses)
  python tools/stack.py lint
        series and files agree, headers, trailers, whitespace, python/ paths,
        the debug topic never marked for upstream; patches/ports/** too
  python tools/stack.py port --onto VERSION [--repo URL_OR_PATH]
  python tools/stack.py port --continue | --skip --reason TEXT | --abort | --status
        a resumable port session in build/port/: the stack onto release
        VERSION patch by patch (strict git am, then --3way; recorded
        resolutions reused, git rerere); it stops at the first patch that
        does not resolve, with the conflict markers in build/port/tree and
        the next steps on screen; --continue after you commit the
        resolution there (commits you add after it become new patches),
        --skip drops the patch (the reason goes into patches/series),
        --abort removes the session (patches/ and upstream.lock untouched);
        at the end patches/ is refreshed, upstream.lock pins VERSION (every
        field verified, as rebase --write), and a per-patch git range-diff
        is printed and kept in build/port/range-diff.txt
  python tools/stack.py port --topic T --onto VERSION|COMMIT [--repo URL_OR_PATH]
        the same session for one topic, without moving the pin: the pinned
        topic's patches onto that upstream (a release through its verified
        artifact, or a commit of --repo), on the port series they require
        (Requires:); --skip records '# not ported: X.patch -- why'; at the
        end patches/ports/<label>/T/ is written (series and mails, each with
        Ports: naming its pinned patch, Evidence: carried over), atomically;
        patches/ and upstream.lock are never written

  python tools/stack.py roll [--release VERSION]... [--topic T]... [--repo URL] [--out build/roll]
        [--no-evidence] [--test-python PY] [--branch [T]]
        every release newer than the pin (pip's list): the pinned stack as
        check --against tries it, each topic's series for the release (the
        one whose applies: ranges hold it) as export --check tries it, the
        Evidence: tests before/after; one patch-health table in OUT/roll.md
        and OUT/roll.json (written whole); patches already upstream proposed
        for dropping; recorded resolutions (build/port-rr-cache) reused;
        --branch then starts the topic port session a person finishes with
        port --continue
  python tools/stack.py lint --roll OUT/roll.json
        also: no applies: range holds a release where the roll found its
        patch not carried

Every verb takes --json. Exit codes: 0 ok (port: finished, aborted,
reported), 1 a patch does not resolve / lint findings / refresh --check
found changes / export failed / the port stopped for you / a roll cell
needs a person, 2 bad input (port:
no session, one already there, unresolved conflicts at --continue), 3
integrity failure (docs/stack.md).
"""


import argparse
import contextlib
import dataclasses
import json
import os
import tempfile
from pathlib import Path

from .. import builder, cli, lock as lockmod, locking, project, release_list, series, stack, versions
from ..errors import UsageError
from ..stack import port, ports, roll
from ..stack.refresh import check_tree


def parse(argv):
    ap = cli.Parser(prog="python tools/stack.py", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true")
    common.add_argument("-q", "--quiet", action="store_true")
    common.add_argument("--cache", metavar="DIR")
    cli.add_root(common)
    common.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                        help="if another process is writing the series or the tree, wait up to this long "
                             "(default 0: refuse at once, exit 2, naming its pid)")
    sub = ap.add_subparsers(dest="verb", required=True, parser_class=cli.Parser)
    r = sub.add_parser("rebase", parents=[common])
    r.add_argument("--onto", required=True, metavar="VERSION|COMMIT")
    r.add_argument("--repo", metavar="URL_OR_PATH")
    r.add_argument("--write", action="store_true")
    c = sub.add_parser("check", parents=[common])
    c.add_argument("--against", required=True, metavar="VERSION|COMMIT")
    c.add_argument("--repo", metavar="URL_OR_PATH")
    f = sub.add_parser("refresh", parents=[common])
    f.add_argument("--tree", metavar="DIR")
    f.add_argument("--check", action="store_true")
    e = sub.add_parser("export", parents=[common])
    e.add_argument("--topic", required=True)
    e.add_argument("--onto", metavar="VERSION|COMMIT")
    e.add_argument("--repo", metavar="URL_OR_PATH")
    e.add_argument("--out", default="export")
    e.add_argument("--no-tests", action="store_true")
    e.add_argument("--pinned", action="store_true",
                   help="export the pinned patches (rebased) even where patches/ports/<label>/T/ exists")
    e.add_argument("--check", action="store_true",
                   help="verify as the export would (strict git am, the evidence, the upstream-style tests) and "
                        "write nothing; the way to verify a topic marked Upstream-Status: Inappropriate (debug)")
    e.add_argument("--test-python", metavar="PY",
                   help="the interpreter that runs a ported series' upstream-style tests (test/...), one with "
                        "SGLang's dependencies (default: this one)")
    li = sub.add_parser("lint", parents=[common])
    li.add_argument("--roll", metavar="JSON", help="a roll report (roll --json, or OUT/roll.json): every "
                                                   "applies: range is checked against its findings too")
    ro = sub.add_parser("roll", parents=[common])
    ro.add_argument("--release", action="append", metavar="VERSION",
                    help="roll onto this release only (repeatable; default: every release newer than the pin)")
    ro.add_argument("--repo", metavar="URL_OR_PATH",
                    help="SGLang's git history: already-upstream patches are then also found by git patch-id, "
                         "naming the upstream commit")
    ro.add_argument("--out", metavar="DIR",
                    help="where roll.md and roll.json are written (default: build/roll in the checkout)")
    ro.add_argument("--topic", action="append", metavar="T",
                    help="these topics' rows only (repeatable; default every topic); the pinned stack is tried "
                         "whole all the same, as check --against tries it")
    ro.add_argument("--branch", nargs="?", const="", metavar="T",
                    help="then start the topic port session (port --topic T --onto NEWEST, build/port) for "
                         "topic T, or without T for the first topic that needs a person on the newest release: "
                         "its tree's branch 'patched' carries what git could, for you to finish with "
                         "port --continue (it replaces that topic's port series at the end)")
    ro.add_argument("--no-evidence", action="store_true", help="do not run the port series' Evidence: tests")
    ro.add_argument("--test-python", metavar="PY",
                    help="the interpreter of the port series' upstream-style tests (as export's)")
    pt = sub.add_parser("port", parents=[common])
    what = pt.add_mutually_exclusive_group(required=True)
    what.add_argument("--onto", metavar="VERSION", help="start a session onto this release")
    what.add_argument("--continue", dest="cont", action="store_true",
                      help="take the resolution committed in build/port/tree and go on")
    what.add_argument("--skip", action="store_true", help="drop the stopped patch (needs --reason)")
    what.add_argument("--abort", action="store_true", help="remove the session; patches/ and the lock untouched")
    what.add_argument("--status", action="store_true", help="where the session stands")
    pt.add_argument("--topic", metavar="T", help="with --onto: port topic T to patches/ports/<label>/T/ "
                                                 "(the pin stays); --onto may then be a commit of --repo")
    pt.add_argument("--repo", metavar="URL_OR_PATH", help="SGLang's git history, for the new lock "
                                                          "(default: the lock's repo); with --topic, the "
                                                          "history --onto COMMIT is read from")
    pt.add_argument("--reason", metavar="TEXT", help="with --skip: why the patch is no longer needed")
    pt.add_argument("--replace", action="store_true",
                    help="with --topic: replace the port series already in patches/ports/<label>/T/ (refused "
                         "without it)")
    args = ap.parse_args(argv)
    if args.verb == "port":
        if args.reason is not None and not args.skip:
            raise UsageError("port --reason goes with --skip", hint="port --skip --reason TEXT")
        if args.repo and not args.onto:
            raise UsageError("port --repo goes with --onto (the session keeps the repo it started with)",
                             hint="port --onto VERSION --repo URL_OR_PATH")
        if args.replace and args.topic is None:
            raise UsageError("port --replace goes with --topic (it replaces a topic's port series)",
                             hint="port --topic T --onto VERSION --replace")
        if args.topic is not None and not args.onto:
            raise UsageError("port --topic goes with --onto (the session keeps the topic it started with)",
                             hint="port --topic T --onto VERSION; --continue, --skip, --abort and --status "
                                  "take on the session there, whatever it ports")
    return args


def onto_of(spec, repo):
    v = versions.release(spec)
    if v is not None and len(v.release) >= 2:  # N.N...: a bare number could be a commit
        release_list.require(spec)             # a release pip does not list: exit 2 before any work
        return stack.Onto(version=spec, repo=repo)
    if repo:
        return stack.Onto(commit=spec, repo=repo)
    raise UsageError(f"{spec!r} is not a release version", hint="give a version like 0.5.14, or a commit with --repo")


def rebase_text(report):
    lines = [f"onto {report.onto}:"]
    for r in report.patches:
        extra = ""
        if r.upstream_commit:
            extra = f" (upstream {r.upstream_commit[:12]})"
        if r.ported:
            pt = r.ported
            extra = (f" by {pt['port']}" if "dropped" not in pt else
                     f" ({pt['port']}: dropped, {pt['dropped']})") + f" (git: {r.git_status})"
        if r.status is stack.Status.APPLIED and not r.changed:
            extra = " (unchanged)"
        if r.not_ported:
            extra += f" (not ported by {r.not_ported['port']}: {r.not_ported['not_ported']})"
        if r.covered:
            extra += f" (a port carries it: {r.covered.get('port')})"
        lines.append(f"  {r.index:>2} {r.patch:<40} {r.status}{extra}")
        if r.failure and r.status is stack.Status.CONFLICT:
            lines += ["     " + l for l in builder.format_failure(r.failure).splitlines()[1:]]
    lines.append("every patch resolved" if report.resolved else "unresolved patches: not writable")
    if report.ported:
        lines.append(f"{report.ported} patch(es) covered by the ported series in patches/ports/")
    if report.port_line:
        lines.append(report.port_line)
    return "\n".join(lines)


SERIES_LOCK = ".sgl-overlay-series.lock"


def series_lock(root, wait, progress):
    """One writer of patches/ and upstream.lock at a time (``.sgl-overlay-series.lock``)."""
    return locking.hold(Path(root) / SERIES_LOCK, f"the patch series of {Path(root).resolve()}", wait=wait,
                        progress=progress,
                        hint="another tools/stack.py is writing patches/ or upstream.lock; wait for it, or pass "
                             "--wait SECONDS (a lock whose process died is free again by itself)")


def main(argv):
    args = parse(argv)
    if args.wait < 0:
        raise UsageError(f"--wait must be 0 or more seconds, got {args.wait:g}", hint="e.g. --wait 600")
    progress = cli.Progress("stack", quiet=args.quiet)
    root = project.find_root(args.root)
    verb = VERBS[args.verb]
    verb.check(args)
    with contextlib.ExitStack() as held:
        if verb.writes_series(args):
            held.enter_context(series_lock(root, args.wait, progress))
        dest = verb.writes_tree(args)
        if dest:
            held.enter_context(builder.lock_dest(dest, args.wait, progress))
        return verb.handler(args, progress, root)


def _lint(args, progress, root):
    r = stack.lint_report(root, roll_json(args.roll) if args.roll else None)
    return cli.emit(r, args.json, "\n".join(f"{p['error']}\n  hint: {p['hint']}" for p in r.problems)
                    or "lint: clean", exit_code=r.exit_code)


def _rebase(args, progress, root):
    return _rebase_or_check(args, progress, root, args.onto, rebasing=True)


def _check(args, progress, root):
    return _rebase_or_check(args, progress, root, args.against, rebasing=False)


def _rebase_or_check(args, progress, root, spec, rebasing):
    """rebase --onto (and --write) and check --against: the same run, told apart by ``rebasing``."""
    lock = lockmod.load(root / "upstream.lock")
    onto = onto_of(spec, args.repo)
    cover = stack.coverage(root, onto)           # a bad port: exit 2 before work
    said = stack.not_ported_in(root, onto) if rebasing else {}
    report = stack.rebase(lock, series.load(root), onto, args.cache, progress)
    if cover and rebasing:
        report = stack.mark_ported(report, cover)
    elif cover:                                  # check: what git reported, the port named beside it
        report = stack.mark_covered(report, cover)
    if said:
        report = stack.mark_not_ported(report, said)
    if cover:
        report = dataclasses.replace(report, port_series=tuple(ports.covering(root, onto)),
                                     port_line=ports.covering_line(root, onto))
    if rebasing and args.write:
        report = dataclasses.replace(report, written=stack.write_rebase(root, lock, series.load(root), report, onto,
                                                                        args.cache, progress))
    return cli.emit(report, args.json, rebase_text(report), exit_code=report.exit_code)


def _refresh(args, progress, root):
    lock = lockmod.load(root / "upstream.lock")
    if args.tree:
        r = stack.refresh(root, args.tree, write=not args.check)
    else:
        with tempfile.TemporaryDirectory(prefix="sgl-overlay-refresh-") as t:
            builder.build(lock, series.load(root), Path(t) / "sglang", cache=args.cache, progress=progress)
            r = stack.refresh(root, Path(t) / "sglang", write=not args.check)
    text = "\n".join(f"  {c.change}: {c.patch}" for c in r.changes) or "  nothing to change"
    return cli.emit(r, args.json, ("would change:\n" if args.check else "refreshed:\n") + text,
                    exit_code=r.exit_code)


def _export(args, progress, root):
    lock = lockmod.load(root / "upstream.lock")
    test_python = test_python_of(args)
    spec = args.onto
    if not spec:
        if args.repo:
            raise UsageError("export with --repo needs --onto COMMIT", hint="e.g. --onto main")
        spec = release_list.list_releases(progress)[-1]       # the newest release
    r = stack.export(root, lock, args.topic, onto_of(spec, args.repo), args.out, args.cache, progress,
                     run_tests=not args.no_tests, test_python=test_python, use_port=not args.pinned,
                     check_only=args.check)
    if args.pinned and ports.covering(root, onto_of(spec, args.repo)):
        r = dataclasses.replace(r, port_line=ports.covering_line(root, onto_of(spec, args.repo))
                                + " (--pinned: not used)")
    return cli.emit(r, args.json, export_text(r), exit_code=r.exit_code)


def test_python_of(args):
    """``--test-python``: an executable file (exit 2 before any work otherwise), its path absolute."""
    if args.test_python and not (Path(args.test_python).is_file() and os.access(args.test_python, os.X_OK)):
        raise UsageError(f"--test-python {args.test_python}: not an executable file",
                         hint="give the python of an environment with SGLang's dependencies, "
                              "e.g. VENV/bin/python")
    return os.path.abspath(args.test_python) if args.test_python else None   # a venv's link kept


def roll_json(path):
    """A roll report (``roll --json``, or OUT/roll.json), for lint --roll."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"--roll {path}: not a readable roll report ({e})",
                         hint="give the roll.json a tools/stack.py roll wrote (default build/roll/roll.json)")
    if not isinstance(data, dict) or "releases" not in data or "rows" not in data:
        raise UsageError(f"--roll {path}: not a roll report (no 'releases' and 'rows')",
                         hint="give the roll.json a tools/stack.py roll wrote (default build/roll/roll.json)")
    return data


def _roll(args, progress, root):
    test_python = test_python_of(args)
    lock = lockmod.load(root / "upstream.lock")
    if args.release:
        known = release_list.list_releases(progress, pre=True)
        for v in args.release:
            release_list.require(v, known)
        releases = sorted(set(args.release), key=versions.release)
    else:
        releases = roll.newer_releases(release_list.list_releases(progress), lock.version)
    tool = "python tools/stack.py port" + (f" --root {args.root}" if args.root else "")
    if args.branch is not None:
        if not releases:
            raise UsageError("roll --branch: no release newer than the pin to port onto",
                             hint="give one with --release VERSION")
        port.refuse_running(root, shown, tool)        # one session a checkout: exit 2 before any work
    out = Path(args.out) if args.out else root / "build" / "roll"
    out.mkdir(parents=True, exist_ok=True)
    r = roll.roll(root, lock, releases, args.cache, progress, repo=args.repo, run_evidence=not args.no_evidence,
                  rr_cache=root / port.RR_CACHE, test_python=test_python, topics=args.topic)
    command = "python tools/stack.py roll" + "".join(f" --release {v}" for v in args.release or ()) + \
        "".join(f" --topic {t}" for t in args.topic or ()) + (" --no-evidence" if args.no_evidence else "")
    if args.branch is not None:
        topic = args.branch or roll.needing(r, releases[-1])
        if topic:
            progress(f"--branch: the topic port session of {topic} onto v{releases[-1]}")
            pr = port.start_topic(root, topic, stack.Onto(version=releases[-1], repo=args.repo), args.cache,
                                  progress=progress, shown=shown, tool=tool, replace=True)
            s = pr.session
            r = dataclasses.replace(r, branch=roll.Branch(
                topic, releases[-1], pr.outcome, shown(pr.places.session),
                s.stop.patch if s and s.stop else "", port_text(pr, tool)))
        else:
            progress(f"--branch: every topic's series carries onto v{releases[-1]}: no session started")
        command += " --branch" + (f" {args.branch}" if args.branch else "")
    text = roll.markdown(r, command)
    # roll.json is the --json document (docs/json.md)
    port.atomic_write(out / "roll.json", json.dumps(cli.document(r, r.exit_code), indent=2, sort_keys=True) + "\n")
    port.atomic_write(out / "roll.md", text)
    progress(f"wrote {out / 'roll.md'} and {out / 'roll.json'}")
    return cli.emit(r, args.json, text, exit_code=r.exit_code)


def export_text(r):
    text = [f"topic {r.topic} onto {r.onto}: {r.status}" + (f" (from {r.port})" if r.port else "")]
    text += [f"  on the {q['topic']} port ({q['patches']} patch(es), Requires: {q['topic']})"
             for q in r.requires or ()]
    for p in r.patches:
        text.append(f"  {p.patch}: {p.status}")
        if p.failure:
            text += ["     " + l for l in builder.format_failure(p.failure).splitlines()[1:]]
        for t in (getattr(p, "evidence", None) or {}).get("tests", []):
            text.append(f"    {t['node']}: before {t['before']}, after {t['after']}: {t['verdict']}")
    for u in r.upstream_tests or ():
        text.append(f"  {u['file']}: pristine {u['pristine']['outcome']}, patched {u['patched']['outcome']}: "
                    f"{u['verdict']}")
    if r.tests:
        text.append(f"  tests: {r.tests['summary']}")
    text += [f"  warning: {w}" for w in r.warnings or ()]
    text += [f"  failed: {f}" for f in r.failed or ()]
    if r.port_line:
        text.append(f"  {r.port_line}")
    text += [f"  wrote {f}" for f in r.files]
    if r.status is stack.ExportStatus.CHECKED:
        text.append("  --check: nothing written")
    return "\n".join(text)


def shown(path):
    """A path as the person typed it: relative to the current directory
    when it is inside it."""
    path = Path(path)
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return str(path)
    return str(rel) if str(rel) != "." else "."


def _port(args, progress, root):
    tool = "python tools/stack.py port" + (f" --root {args.root}" if args.root else "")
    kw = {"progress": progress, "shown": shown, "tool": tool}
    line = ""
    if args.onto:
        onto = onto_of(args.onto, args.repo)
        line = ports.covering_line(root, onto)
        if line:
            progress(line)
    if args.onto and args.topic is not None:
        r = port.start_topic(root, args.topic, onto, args.cache, replace=args.replace, **kw)
    elif args.onto:
        r = port.start(root, onto, args.cache, **kw)
    elif args.cont:
        r = port.continue_(root, args.cache, **kw)
    elif args.skip:
        r = port.skip(root, args.reason, args.cache, **kw)
    elif args.abort:
        r = port.abort(root, **kw)
    else:
        r = port.status(root, **kw)
    return cli.emit(r, args.json, port_text(r, tool) + (f"\n{line}" if line else ""), exit_code=r.exit_code)


@dataclasses.dataclass(frozen=True)
class Verb:
    """What a verb runs and what it writes, so that ``main`` holds the right locks first."""
    handler: object                                   # (args, progress, root) -> exit code
    writes_series: object = lambda args: False        # args -> whether it writes patches/ or upstream.lock
    writes_tree: object = lambda args: None           # args -> the folder it writes (held with builder.lock_dest)
    check: object = lambda args: None                 # args -> None, or raises UsageError: before any lock or work


VERBS = {
    "rebase": Verb(_rebase, writes_series=lambda args: args.write),
    "check": Verb(_check),
    "refresh": Verb(_refresh, writes_series=lambda args: not args.check, writes_tree=lambda args: args.tree,
                    check=lambda args: args.tree and check_tree(args.tree)),
    "export": Verb(_export, writes_tree=lambda args: None if args.check else args.out),
    "lint": Verb(_lint),
    "roll": Verb(_roll, writes_series=lambda args: args.branch is not None),
    "port": Verb(_port, writes_series=lambda args: True),
}


RESOLVED_BY = {port.Resolution.RERERE: ", resolution reused (rerere)", port.Resolution.PERSON: ", resolved by you"}


def port_text(r, tool):
    if r.outcome is port.Outcome.ABORTED:
        return f"port session removed: {r.note}"
    s = r.session
    tree = shown(r.places.tree)
    head = {port.Outcome.STOPPED: "stopped", port.Outcome.FINISHED: "finished",
            port.Outcome.IN_PROGRESS: "in progress"}[r.outcome]
    if s.topic:
        on = "".join(f" on the {t} port ({n})" for t, n in s.requires)
        lines = [f"port topic {s.topic} of v{s.old_version} -> {s.label}{on}, to {s.target} "
                 f"({shown(r.places.session)}): {head}"]
    else:
        lines = [f"port v{s.old_version} -> {s.label} ({shown(r.places.session)}): {head}"]
    for d in r.patches():
        res = port.Resolution(d["resolution"])
        if res is port.Resolution.SKIPPED:
            extra = f", skipped: {d['reason']}" + (" (# not ported)" if s.topic else "")
        elif not d["commits"]:
            extra = f", left the series: {d['reason']}"
        else:
            extra = RESOLVED_BY.get(res, "")
        if d["change"]:
            extra += f" ({d['change']})"
        lines.append(f"  {d['index']:>2} {d['patch']:<40} {d['status']}{extra}")
        lines += [f"     + {c['name']} (a new patch after it)" for c in d["commits"] if c["name"] != d["patch"]]
    if s.stop:
        st = s.stop
        lines.append(f"  {st.index:>2} {st.patch:<40} {st.status}: waiting for you")
        if st.failure:
            lines += ["     " + l for l in builder.format_failure(st.failure).splitlines()[1:]]
        if st.status is stack.Status.PROBABLY_UPSTREAM:
            lines.append("     it applies in reverse with one line of context: probably upstream already; "
                         "if so, drop it with --skip --reason")
        now = r.facts.unmerged if r.facts else st.conflicted
        if st.reused:
            lines.append(f"recorded resolutions reused (staged): {', '.join(st.reused)}")
        if now:
            lines.append(f"conflicted files (markers in place in {tree}):")
            lines += [f"  {f}" for f in now]
        elif st.am and not st.conflicted:
            lines.append("git am --3way could not merge it:")
            lines += [f"  {l}" for l in st.git_am.splitlines()[:6]]
        steps, other = port.next_steps(st, tree, tool)
        lines.append("next:")
        lines += [f"  {i}. {t}" for i, t in enumerate(steps, 1)]
        lines += [f"  or: {t}" for t in other]
    if s.phase is port.Phase.DONE and s.staged:
        ch = s.staged.changes
        count = {c: sum(1 for _, x in ch if x is c) for c in port.Change}
        if s.topic:
            lines.append(f"{s.target}: {count[port.Change.REWRITTEN]} rewritten, {count[port.Change.ADDED]} "
                         f"added, {count[port.Change.REMOVED]} removed, {count[port.Change.UNCHANGED]} unchanged, "
                         f"{sum(1 for d in r.patches() if not d['commits'])} not ported; patches/ and "
                         f"upstream.lock untouched (the pin stays v{s.old_version})")
            lines.append(f"range-diff (the pinned v{s.old_version} patches against the port patches; kept in "
                         f"{shown(r.places.range_diff)}):")
        else:
            lines.append(f"patches/: {count[port.Change.REWRITTEN]} rewritten, {count[port.Change.ADDED]} added, "
                         f"{count[port.Change.REMOVED]} dropped, {count[port.Change.UNCHANGED]} unchanged; "
                         f"upstream.lock pins {s.label}")
            lines.append(f"range-diff (old v{s.old_version} series against the new one; kept in "
                         f"{shown(r.places.range_diff)}):")
        lines += ["  " + l for rd in s.range_diff for l in rd.lines]
    lines += [f"lint: {p['error']}\n  hint: {p['hint']}" for p in r.lint]
    if r.note:
        lines.append(r.note)
    return "\n".join(lines)
