"""The test a bisection runs on each tree, by git bisect run's exit
protocol: a harness scenario (``ScenarioTest``: the harness's child
interpreter, run from here) or any command (``CommandTest``), behind one
small interface (``StepTest``).  Every process a test starts is its own
process group, started through ``Children``, so an interrupt or a timeout
ends exactly those."""
import abc
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time

from ..errors import OverlayError, UsageError
from .terms import Raw

TAIL = 4000                         # characters of a test's output kept in the log
STOP_WAIT = 10                      # seconds a stopped test gets between SIGTERM and SIGKILL


@dataclasses.dataclass(frozen=True)
class TestRun:
    code: int
    raw: Raw
    output: str
    seconds: float
    summary: str = ""


class TimedOut(Exception):
    """The test ran past its --timeout (its processes are killed); ``output``: what it wrote."""

    def __init__(self, output=""):
        super().__init__("timed out")
        self.output = output or ""


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

    def communicate(self, p, input=None, deadline=None):
        """(stdout, stderr) of ``p``, which is forgotten once it ends; past
        ``deadline`` (a ``time.monotonic()``) its group is killed: TimedOut."""
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return p.communicate(input, timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise TimedOut(p.communicate()[0]) from None
        finally:
            self.done(p)

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
                p.wait(timeout=STOP_WAIT)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


class StepTest(abc.ABC):
    """What a step runs on a tree."""

    timeout: float | None           # seconds per run; longer counts as untestable

    @abc.abstractmethod
    def spec(self) -> dict:
        """The test as the log's start record keeps it (``Test(**spec)`` makes it again)."""

    @abc.abstractmethod
    def describe(self) -> str: ...

    @abc.abstractmethod
    def cli_args(self) -> list:
        """The options that give this test to tools/bisect.py again."""

    @abc.abstractmethod
    def check(self) -> None:
        """Refuse bad input before any step (UsageError)."""

    @abc.abstractmethod
    def run(self, tree, children: Children) -> TestRun: ...

    def _timed_out(self, t0, output=""):
        return TestRun(125, Raw.SKIP, output[-TAIL:], time.monotonic() - t0,
                       f"timed out after {self.timeout} s (counted as untestable)")

    def _deadline(self, t0):
        return None if self.timeout is None else t0 + self.timeout


def Test(scenario=None, command=None, root=None, timeout=None) -> StepTest:  # noqa: N802 - the log's test record
    """The test from its spec (the log's ``test`` record, or the command
    line): the scenario if one is named, else the command."""
    if scenario:
        return ScenarioTest(scenario, timeout)
    return CommandTest(tuple(command or ()), root, timeout)


@dataclasses.dataclass(frozen=True)
class ScenarioTest(StepTest):
    """A harness scenario: its sizing run on the tree (the harness's child
    interpreter and any remedy re-runs), judged as tools/regress.py judges it."""
    scenario: str
    timeout: float | None = None

    def spec(self):
        return {"scenario": self.scenario, "command": [], "timeout": self.timeout}

    def describe(self):
        return f"scenario {self.scenario}"

    def cli_args(self):
        return ["--scenario", self.scenario]

    def check(self):
        from ..harness import ScenarioError, load_scenario
        try:
            load_scenario(self.scenario)
        except ScenarioError as e:
            raise UsageError(f"--scenario {self.scenario}: {e}", hint="python tools/regress.py --list")
        from ..extras import require
        require("harness", f"bisect --scenario {self.scenario}")

    def run(self, tree, children):
        from ..harness import load_scenario, run_scenario
        t0 = time.monotonic()
        deadline = self._deadline(t0)

        def launch(argv, *, input, timeout, capture_output, text, **kw):    # subprocess.run's, for the harness
            p = children.start(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=text, **kw)
            harness_deadline = time.monotonic() + timeout
            try:
                out, err = children.communicate(p, input, min(harness_deadline, deadline or harness_deadline))
            except TimedOut as e:
                if deadline is not None and deadline <= harness_deadline:
                    raise
                raise subprocess.TimeoutExpired(argv, timeout, e.output) from None
            return subprocess.CompletedProcess(argv, p.returncode, out, err)

        try:
            report = run_scenario(tree, load_scenario(self.scenario), launch=launch)
        except TimedOut:
            return self._timed_out(t0)
        except OverlayError as e:
            # the harness's own error (a tree it cannot read, a package missing
            # here): no verdict on this tree, and none on the next one either
            raise UsageError(f"the scenario test stopped on {tree}: {e.message}",
                             hint=e.hint or "run tools/regress.py on that tree") from None
        except subprocess.TimeoutExpired as e:
            raise UsageError(f"the scenario test stopped on {tree}: the harness's child interpreter ran past "
                             f"{e.timeout:g} s", hint=f"run tools/regress.py --tree {tree} --scenario {self.scenario} "
                             "to see where it hangs") from None
        code, summary, output = judged(report)
        return TestRun(code, Raw.of_exit(code), output[-TAIL:], time.monotonic() - t0, summary)


def judged(report):
    """(exit code, summary, output) of a harness Report: the one place bisect reads one."""
    from ..harness.draft_reading import overstated
    s = f"{report.outcome}: {report.judgement}"
    if overstated({"drafter_reading": report.drafter_reading}):
        s += " [the target's reading: this release also counts the drafter's weights, which the scenario lacks]"
    e = report.error or {}
    if e.get("message") and e.get("message")[:80] not in s:
        s += f" [{e.get('type', 'error')}: {e['message'][:300]}" + (f" at {e['where']}" if e.get("where") else "") + "]"
    # the output as tools/regress.py --json prints it
    return report.result.exit_code, s, json.dumps(report.to_json(), indent=2, default=str) + "\n"


@dataclasses.dataclass(frozen=True)
class CommandTest(StepTest):
    """Any command, ``{tree}`` replaced by the tree's path, run in ``root``."""
    command: tuple
    root: object = None             # the working directory (the project's root), or this one
    timeout: float | None = None

    def spec(self):
        return {"scenario": None, "command": list(self.command), "timeout": self.timeout}

    def describe(self):
        return shlex.join(self.command)

    def cli_args(self):
        return ["--", *self.command]

    def check(self):
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

    def run(self, tree, children):
        t0 = time.monotonic()
        argv = [a.replace("{tree}", str(tree)) for a in self.command]
        p = children.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           cwd=str(self.root) if self.root else None)
        try:
            out, _ = children.communicate(p, deadline=self._deadline(t0))
        except TimedOut as e:
            return self._timed_out(t0, e.output)
        code = 128 - p.returncode if p.returncode < 0 else p.returncode    # killed by a signal: abort
        return TestRun(code, Raw.of_exit(code), (out or "")[-TAIL:], time.monotonic() - t0)
