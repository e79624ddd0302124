"""The test: a scenario (tools/regress.py) or any command, run on a tree by
git bisect run's exit protocol, in its own process group."""
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..errors import UsageError
from ..harness.draft_reading import overstated
from .terms import classify

TAIL = 4000                         # characters of a test's output kept in the log


@dataclasses.dataclass
class TestRun:
    code: int
    raw: str                        # pass | fail | skip | abort
    output: str
    seconds: float
    summary: str = ""


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
        self.root = Path(root) if root else Path(__file__).resolve().parents[3]
        self.timeout = timeout

    def spec(self):
        return {"scenario": self.scenario, "command": self.command, "timeout": self.timeout}

    def describe(self):
        return f"scenario {self.scenario}" if self.scenario else shlex.join(self.command)

    def check(self):
        """Bad input before any step: an unknown scenario, a command that cannot start."""
        if self.scenario:
            from ..harness import ScenarioError, load_scenario
            try:
                load_scenario(self.scenario)
            except ScenarioError as e:
                raise UsageError(f"--scenario {self.scenario}: {e}", hint="python tools/regress.py --list")
            from ..extras import require
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
    if overstated(r):
        s += " [the target's reading: this release also counts the drafter's weights, which the scenario lacks]"
    e = r.get("error") or {}
    if e.get("message") and e.get("message")[:80] not in s:
        s += f" [{e.get('type', 'error')}: {e['message'][:300]}" + (f" at {e['where']}" if e.get("where") else "") + "]"
    return s
