"""Bisecting upstream SGLang history against a test: the range (published
releases or git commits), a pure strategy from the results so far to the
next points, the verdicts, the JSON-lines log, and running one step
(materialize the tree, pristine or with the patch stack; run the test).

Terms are git's: the range goes from an *old* endpoint to a *new* one.
Plain bisect: old = the test passes (good), new = it fails (bad).
``fixed``: old = it fails, new = it passes (where did upstream fix it?).
A test run's raw result is ``pass``, ``fail``, ``skip`` (untestable) or
``abort``, by git bisect run's exit protocol; ``outcome`` maps it to a term.
See docs/bisect.md.
"""
import concurrent.futures
import dataclasses
import hashlib
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import TOOL_VERSION, builder, gitcmd, source
from .versions import release as release_number
from .errors import ApplyError, OverlayError, UsageError

OLD, NEW, SKIP, ABORT = "old", "new", "skip", "abort"
LOG_SCHEMA = 1
TAIL = 4000                         # characters of a test's output kept in the log


# --------------------------------------------------------------------------
# the range

@dataclasses.dataclass
class Point:
    id: str                         # a version, or a 40-hex commit
    label: str                      # "sglang 0.5.13", or the commit's subject
    ref: str = ""                   # how the user named it (tag, version), if they did

    def short(self):
        return self.id[:10] if len(self.id) == 40 else self.id


@dataclasses.dataclass
class Range:
    kind: str                       # "releases" | "commits"
    points: list                    # oldest first; points[0] old end, points[-1] new end
    extra_old: list = dataclasses.field(default_factory=list)  # also verified old (a good ref off the base)
    repo: str = ""                  # commits: the repository given with --repo
    notes: list = dataclasses.field(default_factory=list)

    def as_dict(self):
        return {"kind": self.kind, "repo": self.repo, "notes": self.notes,
                "points": [dataclasses.asdict(p) for p in self.points],
                "extra_old": [dataclasses.asdict(p) for p in self.extra_old]}

    @classmethod
    def from_dict(cls, d):
        return cls(kind=d["kind"], repo=d.get("repo", ""), notes=list(d.get("notes", [])),
                   points=[Point(**p) for p in d["points"]], extra_old=[Point(**p) for p in d.get("extra_old", [])])

    def point(self, pid):
        return next(p for p in self.extra_old + self.points if p.id == pid)


def release_range(spec, progress=None):
    """``A..B`` over the published releases, both ends included."""
    if spec.count("..") != 1 or not all(spec.split("..")):
        raise UsageError(f"--releases {spec!r} is not of the form OLD..NEW", hint="e.g. --releases 0.5.9..0.5.14")
    lo, hi = spec.split("..")
    for v in (lo, hi):
        if release_number(v) is None:
            raise UsageError(f"--releases {spec!r}: {v!r} is not a release number", hint="e.g. 0.5.12.post1")
    if release_number(lo) >= release_number(hi):
        raise UsageError(f"--releases {spec!r} is empty: {lo} is not older than {hi}",
                         hint="give the older release first (with --fixed too: OLD..NEW)")
    versions = source.list_releases(progress)
    for v in (lo, hi):
        if v not in versions:
            near = [x for x in versions if x.rsplit(".", 1)[0] == v.rsplit(".", 1)[0]] or versions[-5:]
            raise UsageError(f"--releases {spec!r}: sglang {v} is not a published release",
                             hint=f"published releases near it: {', '.join(near)} (python -m pip index versions sglang)")
    lk, hk = release_number(lo), release_number(hi)
    pts = [Point(v, f"sglang {v}", v) for v in versions if lk <= release_number(v) <= hk]
    return Range("releases", pts)


def _git_repo(repo, cache, progress):
    """The cached bare clone of ``repo``, with its branches and tags fetched now."""
    bare, key = source.bare_clone(repo, cache, progress)
    p = gitcmd.run(bare, "fetch", "--quiet", "--tags", "--force", key, "+refs/heads/*:refs/heads/*", check=False)
    if p.returncode != 0 and progress:
        progress(f"could not refresh {repo} ({p.stderr.strip().splitlines()[-1:]}); using the cached clone")
    return bare


def _resolve(bare, ref, opt, repo):
    p = gitcmd.run(bare, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if p.returncode != 0 or not p.stdout.strip():
        raise UsageError(f"{opt} {ref!r}: no such commit, branch or tag in {repo}",
                         hint="check the name (git ls-remote REPO), or give a full commit id")
    return p.stdout.strip()


def _subjects(bare, shas):
    out = gitcmd.run(bare, "log", "--no-walk=unsorted", "--format=%H %s", *shas).stdout if shas else ""
    return dict(line.split(" ", 1) if " " in line else (line, "") for line in out.splitlines())


def commit_range(repo, old_ref, new_ref, all_parents=False, old_opt="--good", new_opt="--bad",
                 cache=None, progress=None):
    """The commits from ``old_ref`` to ``new_ref``: first-parent by default,
    along the ancestry path.  When ``old_ref`` is not an ancestor of
    ``new_ref`` (release tags sit on release branches), the range starts at
    their merge base, and ``old_ref`` itself is verified too."""
    bare = _git_repo(repo, cache, progress)
    old = _resolve(bare, old_ref, old_opt, repo)
    new = _resolve(bare, new_ref, new_opt, repo)
    if old == new:
        raise UsageError(f"{old_opt} {old_ref} and {new_opt} {new_ref} are the same commit {old[:12]}: the range is empty",
                         hint="give two different commits")
    base = gitcmd.run(bare, "merge-base", old, new, check=False).stdout.strip()
    if not base:
        raise UsageError(f"{old_opt} {old_ref} and {new_opt} {new_ref} share no history in {repo}",
                         hint="both refs must come from the same repository")
    if base == new:
        raise UsageError(f"{new_opt} {new_ref} is an ancestor of {old_opt} {old_ref}: the range runs backwards",
                         hint="swap them, or pass --fixed to look for where it started working")
    args = ["rev-list", "--reverse", "--ancestry-path"] + ([] if all_parents else ["--first-parent"])
    chain = gitcmd.run(bare, *args, f"{base}..{new}").stdout.split()
    if not chain or chain[-1] != new:
        chain = [c for c in chain if c != new] + [new]
    subj = _subjects(bare, [base] + chain + ([old] if old != base else []))
    pts = [Point(base, subj.get(base, ""), old_ref if base == old else "")]
    pts += [Point(c, subj.get(c, ""), new_ref if c == new else "") for c in chain]
    rng = Range("commits", pts, repo=repo)
    if old != base:
        rng.extra_old = [Point(old, subj.get(old, ""), old_ref)]
        rng.notes.append(f"{old_opt} {old_ref} ({old[:10]}) is not an ancestor of {new_opt} {new_ref}: bisecting from "
                         f"their merge base {base[:10]} ({subj.get(base, '')!r}), which is tested too")
    return rng


# --------------------------------------------------------------------------
# the strategy (pure)

@dataclasses.dataclass
class Decision:
    test: list = dataclasses.field(default_factory=list)   # point ids to test next
    phase: str = ""                                       # "endpoints" | "bisect"
    verdict: dict = None


def agree(outcomes):
    """One term for a point's runs: the shared one, or "flaky" when they disagree."""
    kinds = set(outcomes)
    return outcomes[0] if len(kinds) == 1 else "flaky"


def cuts(m, k):
    """Positions in a list of ``m`` untested candidates to test at once so
    that the m+1 places the answer can be in fall into k+1 near-equal parts."""
    k = min(k, m)
    if k == 1:
        # binary: the m+1 places split ceil(m/2) (answer at or below the
        # pick) against floor(m/2)+1 (above it), never picking the first
        # candidate when there are two or more -- the same point git bisect
        # picks on a linear range, so neither needs more runs than the other.
        return [max(math.ceil(m / 2) - 1, 1 if m >= 2 else 0)]
    picks = []
    for i in range(1, k + 1):
        j = min(m - 1, max(0, int(i * (m + 1) / (k + 1) + 0.5) - 1))
        while j in picks and j < m - 1:
            j += 1
        if j not in picks:
            picks.append(j)
    rest = [j for j in range(m) if j not in picks]
    return sorted(picks + rest[:k - len(picks)])


def decide(rng, known, jobs=1):
    """From the results so far (``known``: point id -> list of terms, one per
    run) to either the next points to test or the verdict.  Endpoints first
    (the old end before the new one unless ``jobs`` > 1), then a
    (jobs+1)-ary search between the last old and the first new point."""
    for pid, runs in known.items():
        if runs and agree(runs) == "flaky":
            return Decision(verdict={"verdict": "flaky", "point": pid, "runs": list(runs)})
    term = {pid: agree(r) for pid, r in known.items() if r}
    checks = [(p, OLD) for p in rng.extra_old] + [(rng.points[0], OLD), (rng.points[-1], NEW)]
    pending = [p.id for p, _ in checks if p.id not in term]
    if pending:
        return Decision(test=pending[:max(1, jobs)], phase="endpoints")
    for want_skip in (False, True):          # a wrong result outranks an untestable endpoint
        for p, want in checks:
            got = term[p.id]
            if got != want and (got == SKIP) == want_skip:
                return Decision(verdict=_endpoint_verdict(rng, p, want, got, term))
    pts = rng.points
    hi = next(i for i, p in enumerate(pts) if term.get(p.id) == NEW)
    lo = max(i for i in range(hi) if term.get(pts[i].id) == OLD)
    later_old = [p.id for p in pts[hi + 1:] if term.get(p.id) == OLD]
    between = list(range(lo + 1, hi))
    todo = [i for i in between if pts[i].id not in term]
    if todo:
        return Decision(test=[pts[todo[j]].id for j in cuts(len(todo), jobs)], phase="bisect")
    skipped = [pts[i].id for i in between if term.get(pts[i].id) == SKIP]
    if skipped:
        v = {"verdict": "inconclusive", "last_old": pts[lo].id, "first_new": pts[hi].id, "skipped": skipped}
    else:
        v = {"verdict": "first-new", "last_old": pts[lo].id, "first_new": pts[hi].id}
    if later_old:
        v["non_monotonic"] = later_old
    return Decision(verdict=v)


def _endpoint_verdict(rng, p, want, got, term):
    if got == SKIP:
        return {"verdict": "inconclusive", "endpoint": p.id, "expected": want}
    if want == OLD:
        v = {"verdict": "not-in-range", "endpoint": p.id, "new_end": rng.points[-1].id,
             "new_end_term": term[rng.points[-1].id]}
        if p.id == rng.points[0].id and rng.extra_old:
            v["merge_base"] = True
        return v
    return {"verdict": "cannot-reproduce", "endpoint": p.id}


def remaining_steps(rng, known, jobs=1):
    """About how many bisection steps are left (for the progress line):
    each round tests up to ``jobs`` points and keeps one part of jobs+1."""
    term = {pid: agree(r) for pid, r in known.items() if r}
    pts = rng.points
    his = [i for i, p in enumerate(pts) if term.get(p.id) == NEW]
    hi = his[0] if his else len(pts) - 1
    los = [i for i in range(hi) if term.get(pts[i].id) == OLD]
    lo = los[-1] if los else 0
    m = sum(1 for i in range(lo + 1, hi) if pts[i].id not in term)
    steps = 0
    while m > 0:
        k = min(jobs, m)
        steps += k
        m = math.ceil((m - k) / (k + 1))
    return steps


# --------------------------------------------------------------------------
# verdicts in words

def words(v, rng, fixed, results):
    """The verdict as plain sentences (first line: the answer)."""
    good, bad = ("fails", "passes") if fixed else ("passes", "fails")
    def name(pid):
        p = rng.point(pid)
        return f"{p.short()} ({p.label})" if rng.kind == "commits" else p.id
    def out(pid):
        r = [x for x in results if x["point"] == pid]
        return r[-1].get("summary") or r[-1].get("output", "").strip()[-600:] if r else ""
    kind = v["verdict"]
    if kind == "first-new":
        head = (f"first fixed: {name(v['first_new'])}; last failing before it: {name(v['last_old'])}" if fixed else
                f"first bad: {name(v['first_new'])}; last good before it: {name(v['last_old'])}")
        lines = [head]
    elif kind == "not-in-range":
        ep = name(v["endpoint"])
        if v.get("merge_base"):
            lines = [f"not in range: the merge base {ep} already {bad} the test, so the change is "
                     "older than where the two refs' histories fork"]
        elif fixed:
            lines = [f"not in range: the old endpoint {ep} already passes: it was fixed before this range "
                     "(or the environment changed), not by a change inside it"]
        else:
            lines = [f"not in range: the good endpoint {ep} fails too: the environment changed or the failure is "
                     "older; no change in this range is the cause"]
        lines.append(f"the test at {ep} said: {out(v['endpoint'])}")
        if v["new_end_term"] == NEW:
            lines.append(f"it {bad} at both ends; at {name(v['new_end'])} the test said: {out(v['new_end'])}")
        else:
            lines.append(f"the new end {name(v['new_end'])} does not {'pass' if fixed else 'fail'} either ({v['new_end_term']}): "
                         "check the range's direction (--fixed)")
    elif kind == "cannot-reproduce":
        ep = name(v["endpoint"])
        lines = [f"cannot reproduce: the {'new' if fixed else 'bad'} endpoint {ep} {'still fails' if fixed else 'passes'}",
                 f"the test at {ep} said: {out(v['endpoint'])}"]
    elif kind == "inconclusive" and "endpoint" in v:
        ep = name(v["endpoint"])
        lines = [f"inconclusive: the endpoint {ep} is untestable, so the range cannot be verified",
                 f"why: {out(v['endpoint'])}"]
    elif kind == "inconclusive":
        lines = [f"inconclusive: the {'fix' if fixed else 'change'} is in {name(v['first_new'])} or one of the "
                 f"{len(v['skipped'])} skipped point(s) after {name(v['last_old'])}:"]
        lines += [f"  skipped {name(pid)}: {out(pid)}" for pid in v["skipped"]]
    elif kind == "flaky":
        lines = [f"flaky: repeated runs at {name(v['point'])} disagreed ({', '.join(v['runs'])}); "
                 "fix the test or the machine before bisecting"]
    else:
        lines = [kind]
    if v.get("non_monotonic"):
        lines.append("note: later point(s) behaved like the old end again: "
                     + ", ".join(name(x) for x in v["non_monotonic"]) + " (the property is not monotonic here)")
    return lines


def finish(v, rng, fixed, results):
    """The verdict record: public name, points with their labels, the
    steps that led there, and the words."""
    rec = dict(v)
    if v["verdict"] == "first-new":
        rec["verdict"] = "first-fixed" if fixed else "first-bad"
    for k in ("first_new", "last_old", "endpoint", "point"):
        if k in v:
            p = rng.point(v[k])
            rec[k] = {"id": p.id, "label": p.label, "ref": p.ref}
    if "skipped" in v:
        rec["skipped"] = [{"id": pid, "label": rng.point(pid).label,
                           "why": next((r.get("summary") or r.get("output", "")[-300:]) for r in reversed(results)
                                       if r["point"] == pid)} for pid in v["skipped"]]
    rec["steps"] = [{"point": r["point"], "label": rng.point(r["point"]).label, "phase": r.get("phase"),
                     "result": r["raw"], "term": r["term"], "seconds": r.get("seconds"),
                     **({"dropped": r["notes"]["dropped"]} if r.get("notes", {}).get("dropped") else {})}
                    for r in results]
    rec["executions"] = len(results)
    rec["fixed"] = fixed
    rec["words"] = words(v, rng, fixed, results)
    return rec


# --------------------------------------------------------------------------
# the log (JSON lines)

class Log:
    """Append-only JSON lines: a ``start`` record (the whole configuration),
    one ``result`` record per test execution as it comes, a ``verdict``."""

    def __init__(self, path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def create(self, header):
        if self.path.exists():
            raise UsageError(f"log {self.path} already exists",
                             hint=f"continue it with --resume {self.path}, or choose another --log")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.append({"type": "start", "schema": LOG_SCHEMA, "tool_version": TOOL_VERSION, **header})

    def repair(self):
        """Cut a torn last line (a crash mid-write) before appending again."""
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(cut)
            return True
        return False

    def append(self, record):
        with self._lock, open(self.path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def read(path):
        """(header, results, verdict or None); a torn last line (a crash
        mid-write) is dropped, any other bad line is an error."""
        path = Path(path)
        try:
            lines = path.read_text().split("\n")
        except OSError as e:
            raise UsageError(f"log {path}: cannot read it ({e.strerror})", hint="give the path bisect printed")
        header, results, verdict = None, [], None
        last = max((i for i, l in enumerate(lines) if l.strip()), default=-1)
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                if n == last:
                    break
                raise UsageError(f"log {path}:{n + 1}: not a JSON record", hint="the log was edited or damaged")
            t = rec.get("type")
            if t == "start":
                header = rec
            elif t == "result":
                results.append(rec)
            elif t == "verdict":
                verdict = rec
        if header is None or header.get("schema") != LOG_SCHEMA:
            raise UsageError(f"log {path}: no start record of schema {LOG_SCHEMA}",
                             hint="this is not a log written by tools/bisect.py")
        return header, results, verdict


def known_from(results, points):
    """Point id -> list of terms, from the log's result records (aborted
    runs left out: the test is run again there once it is fixed)."""
    known = {}
    for r in results:
        if r["point"] in points and r["raw"] != "abort":     # an aborted run is run again after the fix
            known.setdefault(r["point"], []).append(r["term"])
    return known


# --------------------------------------------------------------------------
# the test

@dataclasses.dataclass
class TestRun:
    code: int
    raw: str                        # pass | fail | skip | abort
    output: str
    seconds: float
    summary: str = ""


def classify(code):
    """git bisect run's protocol: 0 pass, 125 skip, 1-127 fail, else abort."""
    if code == 0:
        return "pass"
    if code == 125:
        return "skip"
    if 1 <= code <= 127:
        return "fail"
    return "abort"


def term_of(raw, fixed):
    if raw in ("skip", "abort"):
        return raw
    return (NEW if raw == "pass" else OLD) if fixed else (OLD if raw == "pass" else NEW)


class Children:
    """The test processes this bisect started (each its own process
    group), so an interrupt can end exactly those."""

    def __init__(self):
        self.procs = set()
        self.lock = threading.Lock()
        self.stopping = False

    def start(self, argv, **kw):
        with self.lock:
            if self.stopping:
                raise KeyboardInterrupt
            p = subprocess.Popen(argv, start_new_session=True, **kw)
            self.procs.add(p)
        return p

    def done(self, p):
        with self.lock:
            self.procs.discard(p)

    def stop_all(self):
        with self.lock:
            self.stopping = True
            procs = list(self.procs)
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


class Test:
    """The scenario (tools/regress.py) or any command, ``{tree}`` replaced."""

    def __init__(self, scenario=None, command=None, root=None, timeout=None):
        self.scenario = scenario
        self.command = list(command or [])
        self.root = Path(root) if root else Path(__file__).resolve().parents[2]
        self.timeout = timeout

    def spec(self):
        return {"scenario": self.scenario, "command": self.command, "timeout": self.timeout}

    def describe(self):
        return f"scenario {self.scenario}" if self.scenario else shlex.join(self.command)

    def check(self):
        """Bad input before any step: an unknown scenario, a command that cannot start."""
        if self.scenario:
            from .harness import ScenarioError, load_scenario
            try:
                load_scenario(self.scenario)
            except ScenarioError as e:
                raise UsageError(f"--scenario {self.scenario}: {e}", hint="python tools/regress.py --list")
            from .extras import require
            require("harness", f"bisect --scenario {self.scenario}")
            return
        if not self.command:
            raise UsageError("no test: give --scenario NAME or a command after --",
                             hint="e.g. -- python tools/regress.py --tree {tree} --scenario negative-rest-tp8")
        exe = self.command[0]
        if os.sep in exe:
            ok = os.path.isfile(exe) and os.access(exe, os.X_OK)
        else:
            ok = shutil.which(exe) is not None
        if not ok:
            raise UsageError(f"test command {exe!r} cannot start: not found or not executable",
                             hint="give the command after -- as you would type it; {tree} is replaced by the tree")
        if not any("{tree}" in a for a in self.command):
            raise UsageError(f"test command {shlex.join(self.command)!r} never mentions {{tree}}",
                             hint="the command must test the tree: put {tree} where its path goes")

    def argv(self, tree):
        if self.scenario:
            return [sys.executable, str(self.root / "tools" / "regress.py"), "--tree", str(tree),
                    "--scenario", self.scenario, "--json"]
        return [a.replace("{tree}", str(tree)) for a in self.command]

    def run(self, tree, children):
        t0 = time.monotonic()
        p = children.start(self.argv(tree), stdout=subprocess.PIPE, stderr=subprocess.STDOUT if not self.scenario
                           else subprocess.PIPE, text=True, cwd=str(self.root))
        try:
            out, err = p.communicate(timeout=self.timeout)
            code = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return TestRun(125, "skip", (out or "")[-TAIL:], time.monotonic() - t0,
                           f"timed out after {self.timeout} s (counted as untestable)")
        finally:
            children.done(p)
        code = 128 - code if code < 0 else code          # killed by a signal: abort
        if self.scenario and code not in (0, 1, 125) and code < 128:
            # regress.py's own error (bad input, a package missing here): no
            # verdict on this tree, and none on the next one either
            lines = [x for x in (err or "").splitlines() if x.startswith(("error:", "hint:"))]
            raise UsageError(f"the scenario test stopped with exit {code} on {tree}: "
                             + (lines[0][len("error: "):] if lines else (err or out or "")[-300:].strip()),
                             hint=lines[1][len("hint: "):] if len(lines) > 1 else "run tools/regress.py on that tree")
        run = TestRun(code, classify(code), (out or "")[-TAIL:] + (err or "")[-TAIL:], time.monotonic() - t0)
        if self.scenario:
            run.summary = _scenario_summary(out, err, code)
        return run


def _scenario_summary(out, err, code):
    try:
        r = json.loads(out)
    except ValueError:
        return (err or out or "").strip()[-600:] or f"exit {code}, no report"
    s = f"{r.get('outcome')}: {r.get('judgement', '')}"
    e = r.get("error") or {}
    if e.get("message") and e.get("message")[:80] not in s:
        s += f" [{e.get('type', 'error')}: {e['message'][:300]}" + (f" at {e['where']}" if e.get("where") else "") + "]"
    return s


# --------------------------------------------------------------------------
# trees: pristine or with the stack, cached per point and stack digest

class StepSkip(Exception):
    """The point cannot be tested (the stack does not apply); never 'bad'."""


class TreeCache:
    """Directories keyed by (point, stack digest) under ``root``, each
    ``tree/`` plus ``entry.json``; least recently used ones are evicted past
    ``max_bytes``.  An entry whose tree no longer matches its record is
    rebuilt, not trusted."""

    def __init__(self, root, max_bytes):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.in_use = set()
        self.lock = threading.Lock()

    @staticmethod
    def key(point_id, stack_digest):
        return hashlib.sha256(f"{point_id}\0{stack_digest or 'pristine'}".encode()).hexdigest()[:24]

    def lookup(self, key, say):
        entry = self.root / key
        meta_path = entry / "entry.json"
        with self.lock:
            self.in_use.add(key)
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            head = gitcmd.run(entry / "tree", "rev-parse", "HEAD", check=False).stdout.strip()
            dirty = gitcmd.run(entry / "tree", "status", "--porcelain", "--untracked-files=no", check=False)
            ok = head == meta["head"] and dirty.returncode == 0 and not dirty.stdout.strip()
        except (OSError, ValueError, KeyError):
            ok, meta = False, None
        if not ok:
            say(f"cached tree {entry} does not match its record (modified or damaged): rebuilding it")
            shutil.rmtree(entry, ignore_errors=True)
            return None
        os.utime(meta_path)
        return meta

    def store(self, key, tmp_entry, meta):
        entry = self.root / key
        meta["bytes"] = _du(tmp_entry)
        (tmp_entry / "entry.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        try:
            os.rename(tmp_entry, entry)
        except OSError:                      # another bisect stored it meanwhile
            shutil.rmtree(tmp_entry, ignore_errors=True)
        self.evict()
        return entry / "tree"

    def release(self, key):
        with self.lock:
            self.in_use.discard(key)

    def evict(self):
        with self.lock:
            busy = set(self.in_use)
        entries = []
        for e in self.root.iterdir() if self.root.exists() else []:
            m = e / "entry.json"
            if e.name.startswith(".") or not m.exists():
                continue
            try:
                entries.append((m.stat().st_mtime, json.loads(m.read_text()).get("bytes", 0), e))
            except (OSError, ValueError):
                entries.append((0, 0, e))
        total = sum(b for _, b, _ in entries)
        for _, size, e in sorted(entries):
            if total <= self.max_bytes:
                break
            if e.name in busy:
                continue
            shutil.rmtree(e, ignore_errors=True)
            total -= size

    def scratch(self):
        self.root.mkdir(parents=True, exist_ok=True)
        for old in self.root.glob(".build-*"):
            if time.time() - old.stat().st_mtime > 6 * 3600:
                shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(dir=self.root, prefix=".build-"))


def _du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


class Trees:
    """Point -> tree directory.  Releases: the unpacked artifact
    (``source.release_tree``); commits: a checkout sharing the cached bare
    clone's objects.  ``stack`` given: the patch stack applied on top with
    git am; a patch that applies in reverse (already upstream there) is
    dropped for that step, any other failure makes the step a skip."""

    def __init__(self, rng, lock, stack=None, cache=None, tree_cache=None, progress=None):
        self.rng = rng
        self.lock = lock
        self.stack = stack
        self.cache = cache
        self.trees = tree_cache
        self.say = progress or (lambda m: None)
        self.bare = None
        if rng.kind == "commits":
            self.bare, _ = source.bare_clone(rng.repo, cache, None)

    def get(self, point):
        """(tree path, notes) or raise StepSkip; the caller releases the key."""
        if self.rng.kind == "releases" and self.stack is None:
            return source.release_tree(point.id, self.cache, self.say), {}, None
        key = TreeCache.key(point.id, self.stack.digest if self.stack else None)
        meta = self.trees.lookup(key, self.say)
        if meta is not None:
            if meta.get("skip"):
                self.trees.release(key)
                raise StepSkip(meta["skip"])
            return self.trees.root / key / "tree", {"dropped": meta.get("dropped", [])}, key
        tmp = self.trees.scratch()
        try:
            repo = tmp / "tree"
            if self.rng.kind == "releases":
                self._base_from_release(point, repo)
            else:
                self._base_from_commit(point, repo)
            dropped, skip = self._apply_stack(repo) if self.stack else ([], None)
            head = gitcmd.out(repo, "rev-parse", "HEAD")
            if skip:                           # remembered, so a resume does not re-apply
                shutil.rmtree(repo)
                repo.mkdir()
                gitcmd.init(repo)
                gitcmd.run(repo, "commit", "--quiet", "--allow-empty", "-m", "skip")
                head = gitcmd.out(repo, "rev-parse", "HEAD")
            path = self.trees.store(key, tmp, {"point": point.id, "stack": self.stack.digest if self.stack else None,
                                               "head": head, "dropped": dropped, "skip": skip})
        except BaseException:
            self.trees.release(key)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if skip:
            self.trees.release(key)
            raise StepSkip(skip)
        return path, {"dropped": dropped}, key

    def _base_from_commit(self, point, repo):
        gitcmd.init(repo)
        (repo / ".git" / "objects" / "info" / "alternates").write_text(str(Path(self.bare).resolve() / "objects") + "\n")
        gitcmd.run(repo, "update-ref", "refs/heads/upstream", point.id)
        gitcmd.run(repo, "reset", "--quiet", "--hard", point.id)

    def _base_from_release(self, point, repo):
        source.base_from_release(point.id, repo, self.lock.subdir, self.lock.symlinks, self.cache, self.say)

    def _apply_stack(self, repo):
        """(dropped patch names, None) or ([...], why the step is skipped)."""
        gitcmd.run(repo, "checkout", "--quiet", "-b", "patched")
        total = len(self.stack.patches)
        dropped, kept = [], []
        for p in self.stack.patches:
            failure = builder.apply_patch(repo, p, total)
            if failure is None:
                kept.append(p)
            elif failure.get("applies_in_reverse"):
                dropped.append(p.name)
            else:
                return dropped, builder.format_failure(failure)
        try:
            builder.apply_overlay(repo, self.lock, self.stack)
        except ApplyError as e:
            return dropped, f"the overlay does not apply: {e.message}"
        return dropped, None


# --------------------------------------------------------------------------
# running the bisection

class Bisection:
    """Drive decide() -> run points -> log, until a verdict."""

    def __init__(self, rng, test, trees, log, known, fixed=False, runs=1, jobs=1, progress=None, batch=0):
        self.rng, self.test, self.trees, self.log = rng, test, trees, log
        self.batch = batch                   # rounds of decide() so far (a resume goes on counting)
        self.known = known
        self.fixed, self.runs, self.jobs = fixed, runs, jobs
        self.say = progress or (lambda m: None)
        self.children = Children()
        self.step = sum(1 for pid in known if pid not in self._endpoint_ids())
        self.executions = 0

    def _endpoint_ids(self):
        return {p.id for p in self.rng.extra_old} | {self.rng.points[0].id, self.rng.points[-1].id}

    def _one(self, pid, label):
        point = self.rng.point(pid)
        try:
            tree, notes, key = self.trees.get(point)
        except StepSkip as e:
            return [dict(raw="skip", term=SKIP, code=125, seconds=0.0, summary=f"the stack does not apply: {e}",
                         output="", notes={})]
        try:
            if notes.get("dropped"):
                self.say(f"{label}: dropped (already upstream here, applies in reverse): {', '.join(notes['dropped'])}")
            out = []
            for _ in range(self.runs):
                r = self.test.run(tree, self.children)
                out.append(dict(raw=r.raw, term=term_of(r.raw, self.fixed), code=r.code, seconds=round(r.seconds, 2),
                                summary=r.summary, output=r.output, notes=notes))
                if r.raw == "abort":
                    break
            return out
        finally:
            if key:
                self.trees.trees.release(key)

    def run(self):
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)
        try:
            while True:
                d = decide(self.rng, self.known, self.jobs)
                if d.verdict is not None:
                    return d.verdict
                labels = {}
                self.batch += 1
                total = self.step + remaining_steps(self.rng, self.known, self.jobs)
                for pid in d.test:
                    if d.phase == "endpoints":
                        which = "old" if pid != self.rng.points[-1].id else "new"
                        labels[pid] = f"endpoint ({which}) {self.rng.point(pid).short()}"
                    else:
                        self.step += 1
                        labels[pid] = f"step {self.step} of ~{total}: {self.rng.point(pid).short()}"
                futures = {pool.submit(self._one, pid, labels[pid]): pid for pid in d.test}
                for f in concurrent.futures.as_completed(futures):
                    pid = futures[f]
                    for n, r in enumerate(f.result(), 1):
                        self.executions += 1
                        rec = {"type": "result", "point": pid, "phase": d.phase, "batch": self.batch, "run": n, **r}
                        self.log.append(rec)
                        self.known.setdefault(pid, []).append(r["term"])
                        if r["raw"] == "abort":
                            raise OverlayError(
                                f"the test aborted at {self.rng.point(pid).short()} (exit {r['code']}): "
                                f"{(r['summary'] or r['output'].strip())[-300:]}",
                                hint="exit codes >= 128 stop a bisection (git bisect run's rule); fix the test, "
                                     f"then continue with --resume {self.log.path}")
                    p = self.rng.point(pid)
                    shown = "/".join(x["raw"] for x in f.result())
                    why = f.result()[-1]["summary"]
                    self.say(f"{labels[pid]} ({p.label[:60]}): {shown} -> {agree([x['term'] for x in f.result()])}, "
                             f"{sum(x['seconds'] for x in f.result()):.1f}s" + (f" [{why[:100]}]" if why else ""))
        except BaseException:
            self.children.stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
