"""Find the upstream release or commit that broke (or, with --fixed, fixed) a test.

  python tools/bisect.py --releases OLD..NEW --scenario NAME [--fixed]
  python tools/bisect.py --repo PATH_OR_URL --good REF --bad REF --scenario NAME
  python tools/bisect.py ... -- CMD ARG... {tree} ...     any command as the test
  python tools/bisect.py --resume LOG | --replay LOG
  ... --scenario NAME --report PATH        also write a ready-to-file bug report

The endpoints are verified first (each --runs N times, all must agree),
then the range is bisected; every result is appended to a JSON-lines log
as it comes.  A command test follows git bisect run's protocol: exit 0
good, 125 untestable (skip), 1-127 bad, 128 or more abort; {tree} is
replaced by the tree's path.  --scenario NAME runs tools/regress.py.
With --fixed the old end must fail and the new end pass, and the answer
is the first release or commit where the test passes.  With --repo and
--fixed, --bad is the older ref and --good the newer one.

Exit codes: 0 first-bad / first-fixed found, 1 the test aborted or a tool
failed, 2 bad input (before any step), 3 integrity failure, 4 not-in-range,
5 cannot-reproduce, 6 inconclusive, 7 flaky, 8 --replay of an unfinished
log, 130 interrupted (resume with --resume LOG).  With --report, a verdict
other than first-bad writes no report and keeps its exit code.  docs/bisect.md.
"""
import os
import sys
import argparse
import shlex
import signal
import time
from pathlib import Path

from .. import bisect as B, cli, lock as lockmod, project, series
from ..errors import UsageError

EXIT = {B.Answer.FIRST_BAD: 0, B.Answer.FIRST_FIXED: 0, B.Answer.NOT_IN_RANGE: 4, B.Answer.CANNOT_REPRODUCE: 5,
        B.Answer.INCONCLUSIVE: 6, B.Answer.FLAKY: 7}
UNFINISHED, INTERRUPTED = 8, cli.INTERRUPTED



def parse(argv):
    argv, command = cli.split_at_dashes(argv)
    doc = __doc__.strip()
    ap = cli.Parser(prog="python tools/bisect.py", description=doc.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc.split("\n\n", 1)[1])
    what = ap.add_argument_group("range")
    what.add_argument("--releases", metavar="OLD..NEW", help="published releases, both ends included")
    what.add_argument("--repo", metavar="PATH_OR_URL", help="git commits of this repository")
    what.add_argument("--good", metavar="REF", help="with --repo: the ref where the test passes")
    what.add_argument("--bad", metavar="REF", help="with --repo: the ref where the test fails")
    what.add_argument("--all-parents", action="store_true", help="follow merges (default: first parent only)")
    ap.add_argument("--scenario", metavar="NAME", help="the regression-harness scenario to run (tools/regress.py --list)")
    ap.add_argument("--fixed", action="store_true", help="find where it started working (old = fails, new = passes)")
    ap.add_argument("--with-stack", action="store_true", help="apply the patch stack at every step")
    ap.add_argument("--runs", type=int, default=1, metavar="N", help="runs per point, all must agree (default 1)")
    ap.add_argument("--jobs", type=int, default=1, metavar="K", help="points tested at once (K+1-ary search)")
    ap.add_argument("--timeout", type=float, metavar="S", help="seconds per test run; longer counts as untestable")
    ap.add_argument("--log", metavar="PATH", help="the JSON-lines log (default: in the cache, printed)")
    ap.add_argument("--resume", metavar="LOG", help="continue an interrupted bisection from its log")
    ap.add_argument("--replay", metavar="LOG", help="print the verdict a log holds; run nothing")
    ap.add_argument("--cache", metavar="DIR", help="cache directory (default: $SGL_OVERLAY_CACHE or ~/.cache/sgl-overlay)")
    ap.add_argument("--tree-cache", metavar="DIR", help="where step trees are kept (default: CACHE/bisect-trees)")
    ap.add_argument("--tree-cache-mb", type=int, default=8192, metavar="MB", help="size bound of the tree cache")
    cli.add_root(ap)
    ap.add_argument("--report", metavar="PATH", help="after a first-bad verdict, write an upstream bug report "
                    "(Markdown) there: needs --scenario, not --fixed or --with-stack")
    cli.add_output(ap)
    args = ap.parse_args(argv)
    args.command = command
    return args


def validate(args):
    """Bad input, before anything is fetched or run."""
    if args.resume or args.replay:
        mode = "--resume" if args.resume else "--replay"
        given = [f"--{o.replace('_', '-')}" for o in ("releases", "repo", "good", "bad", "all_parents", "scenario",
                                                      "fixed", "with_stack", "timeout", "log") if getattr(args, o)]
        given += (["--runs"] if args.runs != 1 else []) + (["the command after --"] if args.command else [])
        given += ["--replay"] if args.resume and args.replay else []
        if given:
            raise UsageError(f"{mode} takes the range, the test and their options from the log; drop {given[0]}",
                             hint="only --jobs, --report, --json, -q and the cache options go with it")
        return
    if bool(args.releases) == bool(args.repo):
        raise UsageError("give exactly one range: --releases OLD..NEW, or --repo with --good and --bad",
                         hint="see python tools/bisect.py --help")
    if args.repo and not (args.good and args.bad):
        raise UsageError("--repo needs both --good REF and --bad REF", hint="e.g. --good v0.5.12.post1 --bad v0.5.13")
    if args.releases and (args.good or args.bad or args.all_parents):
        raise UsageError("--good/--bad/--all-parents belong to --repo; with --releases the range is OLD..NEW",
                         hint="e.g. --releases 0.5.9..0.5.14")
    if args.scenario and args.command:
        raise UsageError("give either --scenario or a command after --, not both", hint="see --help")
    for opt in ("runs", "jobs"):
        if getattr(args, opt) < 1:
            raise UsageError(f"--{opt} must be at least 1, got {getattr(args, opt)}", hint=f"e.g. --{opt} 2")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout}", hint="seconds, e.g. --timeout 600")
    if args.report:
        check_report(args.report, bool(args.scenario), args.fixed, args.with_stack)


def check_report(path, scenario, fixed, with_stack, source="given"):
    """--report's conditions, before any step: the harness's figures need a
    scenario; a bug report is about a regression in pristine upstream."""
    if not scenario:
        raise UsageError(f"--report needs --scenario: the report's figures are the harness's (test {source} is a command)",
                         hint="bisect with --scenario NAME (tools/regress.py --list), or drop --report")
    if fixed:
        raise UsageError("--report writes a bug report: it needs a regression, not --fixed",
                         hint="drop --report, or bisect the regression (good = old, bad = new)")
    if with_stack:
        raise UsageError("--report describes pristine upstream trees: it does not go with --with-stack",
                         hint="bisect without --with-stack to report upstream's behaviour")
    if Path(path).is_dir():
        raise UsageError(f"--report {path} is a directory", hint="give the report's file name, e.g. docs/upstream-reports/NAME.md")


def stack_for(root, wanted, digest=None):
    if not wanted:
        return None
    stack = series.load(root)
    if digest and stack.digest != digest:
        raise UsageError(f"the patch stack under {root} changed since the log was written "
                         f"(digest {digest[:12]} then, {stack.digest[:12]} now)",
                         hint="results from another stack cannot be mixed: start a new bisection")
    return stack


def setup(args, progress):
    """(range, test, trees, log, known, settings) for a new run or a resume."""
    args.root = project.find_root(args.root)
    if args.resume or args.replay:
        path = Path(args.resume or args.replay)
        log = B.Log(path)
        if args.resume:
            if not path.is_file():
                B.Log.read(path)                 # the usual "cannot read it" error, before any lock file
            log.own()                            # one live writer: refused at once if another bisect has it
        # a resume works on the checkout it runs in (args.root), whichever one wrote the log
        # (header["stack_root"] records the writer's); the stack's digest, checked below,
        # must still be the log's
        header, results, verdict = B.Log.read(path)
        if args.report:
            check_report(args.report, bool(header["test"].get("scenario")), header["fixed"], header.get("with_stack"),
                         source="in the log")
        rng = B.Range.from_dict(header["range"])
        test = B.Test(root=args.root, **header["test"])
        s = dict(fixed=header["fixed"], runs=header["runs"], jobs=args.jobs if args.jobs > 1 else header["jobs"])
        known = B.known_from(results, {p.id for p in rng.extra_old + rng.points})
        if args.resume and log.repair():
            progress(f"{path}: dropped a torn last line (the run was stopped mid-write)")
        return rng, test, header, log, known, results, verdict, s
    test = B.Test(scenario=args.scenario, command=args.command, root=args.root, timeout=args.timeout)
    test.check()
    stack = stack_for(args.root, args.with_stack)
    if args.releases:
        rng = B.release_range(args.releases, progress)
    else:
        old, new = (args.bad, args.good) if args.fixed else (args.good, args.bad)
        opts = ("--bad", "--good") if args.fixed else ("--good", "--bad")
        rng = B.commit_range(args.repo, old, new, args.all_parents, *opts, cache=args.cache, progress=progress)
    cache = str(project.cache_dir(args.cache))
    path = Path(args.log) if args.log else \
        Path(cache) / "bisect-logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"
    header = {"range": rng.as_dict(), "test": test.spec(), "fixed": args.fixed, "runs": args.runs, "jobs": args.jobs,
              "with_stack": args.with_stack, "stack_root": str(args.root),
              "stack_digest": stack.digest if stack else None, "cache": args.cache,
              "tree_cache": args.tree_cache, "tree_cache_mb": args.tree_cache_mb}
    log = B.Log(path)
    log.create(header)
    return rng, test, header, log, {}, [], None, dict(fixed=args.fixed, runs=args.runs, jobs=args.jobs)


def text(rec, rng, header, test, log_path, root):
    """The verdict record (its JSON form, fresh or as the log keeps it) for people."""
    lines = list(rec["words"])
    if rng.notes:
        lines += [f"note: {n}" for n in rng.notes]
    lines.append(f"{rec['executions']} test execution(s) over {len(rng.points)} point(s):")
    for s in rec["steps"]:
        p = rng.point(s["point"])
        lines.append(f"  {s['phase']:<9} {p.short():<12} {p.label[:50]:<50} {s['result']:<5} -> {s['term']}"
                     + (f"  (dropped: {', '.join(s['dropped'])})" if s.get("dropped") else ""))
    narrow = B.Answer(rec["verdict"]).found and (rec.get("commit_command") or commit_command(
        rng.point(rec["last_old"]["id"]), rng.point(rec["first_new"]["id"]), rec["fixed"], rng, header, test, root))
    if narrow:
        lines.append("narrow it to commits: " + narrow)
    lines.append(f"log: {log_path}")
    return "\n".join(lines)


def commit_command(last_old, first_new, fixed, rng, header, test, root):
    """The bisection of the commits between a found answer's two points, or
    None where the range has nothing finer (it is made of commits)."""
    refs = rng.commit_refs(last_old.id, first_new.id)
    if refs is None:
        return None
    lock = lockmod.load(Path(root) / "upstream.lock")
    old, new = refs
    good, bad = (new, old) if fixed else (old, new)
    cmd = ["python", "tools/bisect.py", "--repo", lock.repo, "--good", good, "--bad", bad]
    cmd += ["--fixed"] if fixed else []
    cmd += ["--with-stack"] if header.get("with_stack") else []
    return shlex.join(cmd + test.cli_args())


def make_trees(rng, header, args, stack, progress):
    cache = header.get("cache") or args.cache
    tree_root = header.get("tree_cache") or args.tree_cache or str(project.cache_dir(cache) / "bisect-trees")
    return B.Trees(rng, lockmod.load(Path(args.root) / "upstream.lock"), stack, cache,
                   B.TreeCache(tree_root, (header.get("tree_cache_mb") or args.tree_cache_mb) << 20), progress)


def write_report(args, rec, rng, header, progress):
    """The bug report for a first-bad verdict (``{"path", "evidence"}``), or
    ``{"path": None, "why"}``: no report for another verdict."""
    if B.Answer(rec["verdict"]) is not B.Answer.FIRST_BAD:
        why = f"no report written to {args.report}: the verdict is {rec['verdict']}, and a report needs a first bad point"
        print(why, file=sys.stderr)
        return {"path": None, "why": why}
    trees = make_trees(rng, header, args, None, progress)
    public = lockmod.load(Path(args.root) / "upstream.lock").repo
    ev = B.evidence.collect(rec, rng, header, trees, public, args.report, args.root, progress)
    B.evidence.write(args.report, B.issue.render(ev))
    progress(f"report: {args.report}")
    return {"path": str(args.report), "evidence": ev}


def main(argv):
    args = parse(argv)
    validate(args)
    progress = cli.Progress("bisect", quiet=args.quiet)
    rng, test, header, log, known, results, verdict, s = setup(args, progress)
    if args.replay or verdict is not None:
        if verdict is None:                  # the log's results hold a verdict its writer did not write down
            d = B.decide(rng, known, 1)
            if d.verdict is None:
                msg = (f"{log.path}: unfinished, {len(results)} result(s); next it would test "
                       f"{', '.join(rng.point(p).short() for p in d.test)}")
                return cli.emit({"status": "unfinished", "log": str(log.path), "executions": len(results),
                                 "next": list(d.test)},
                                args.json, msg + f"\ncontinue with: python tools/bisect.py --resume {log.path}",
                                exit_code=UNFINISHED)
            verdict = record(d.verdict, rng, s["fixed"], results, header, test, args.root).to_json()
        return finished(args, verdict, rng, header, test, log, progress)
    progress(f"log: {log.path}")
    for n in rng.notes:
        progress(f"note: {n}")
    progress(f"{len(rng.points)} {rng.kind} from {rng.points[0].short()} to {rng.points[-1].short()}; "
             f"test: {test.describe()}; {'--fixed: old end must fail' if s['fixed'] else 'old end must pass'}"
             + (f"; resuming after {len(results)} result(s)" if results else ""))
    stack = stack_for(args.root, header["with_stack"], header["stack_digest"])
    if stack is not None and not stack.patches and not stack.overlay:
        progress("--with-stack: the stack is empty, so every step is the pristine tree")
    trees = make_trees(rng, header, args, stack, progress)
    def stop(signum, frame):               # kill PID: the same clean stop as Ctrl-C
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    run = B.Bisection(rng, test, trees, log, known, fixed=s["fixed"], runs=s["runs"], jobs=s["jobs"],
                      progress=progress, batch=max((r.batch for r in results), default=0))
    try:
        v = run.run()
    except KeyboardInterrupt:
        _, done, _ = B.Log.read(log.path)
        resume = f"python tools/bisect.py --resume {log.path}"
        cli.emit({"status": "interrupted", "log": str(log.path), "executions": len(done), "resume": resume},
                 args.json, None, exit_code=INTERRUPTED)
        print(f"interrupted: {len(done)} result(s) are kept in {log.path}; continue with:\n  {resume}",
              file=sys.stderr)
        return INTERRUPTED
    _, results, _ = B.Log.read(log.path)
    rec = record(v, rng, s["fixed"], results, header, test, args.root)
    log.close(rec)
    return finished(args, rec.to_json(), rng, header, test, log, progress)


def record(verdict, rng, fixed, results, header, test, root):
    """The verdict with the run that led to it, built once."""
    narrow = commit_command(*verdict.found, fixed, rng, header, test, root) if verdict.found else None
    return B.Record(verdict, rng, fixed, results, narrow)


def finished(args, rec, rng, header, test, log, progress):
    """Print a verdict record (its JSON form), write --report, return the exit code."""
    extra = {"report": write_report(args, rec, rng, header, progress)} if args.report else {}
    return cli.emit({"status": "done", "log": str(log.path), **rec, **extra}, args.json,
                    text(rec, rng, header, test, log.path, args.root), exit_code=EXIT[B.Answer(rec["verdict"])])

