"""A killed GPU check leaves nothing behind (tools/gpu/process_groups.py).  The check
(tests/gpu/standin_check.py: a case with a blocker, through e2e_cases.run_case as e2e.main
runs it, with stand-ins for the server and the blocker that each start a grandchild) is
interrupted, terminated or killed while its server starts; no process it started, nor any
of theirs, survives.  Linux: processes are read from /proc."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.by_path import ROOT
from tests.gpu.e2e_script import process_groups
from tests.terminal import AT_A_TERMINAL, default_sigint

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")

# a bound for a failure only: every wait below ends as soon as the state it waits for is there
DEADLINE_S = 180


def identity(pid):
    """(pid, start time) of a process that runs, None for one gone (a zombie runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()      # from field 3, the state; field 22 is the start time
    return None if fields[0] in ("Z", "X") else (pid, fields[19])


def wait_for(state, what):
    """state()'s first true value, polled until DEADLINE_S has passed (then the test fails,
    saying what: a text, or a function that says it then)."""
    end = time.monotonic() + DEADLINE_S
    while not (got := state()):
        if time.monotonic() > end:
            pytest.fail(f"still not so after {DEADLINE_S} s: {what() if callable(what) else what}")
        time.sleep(0.1)
    return got


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running(procs):
    return [p for p in procs if identity(p[0]) == p]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_check_ended_mid_case_leaves_no_process_behind(tmp_path, sig):
    pids = tmp_path / "pids"
    pids.mkdir()
    log = tmp_path / "check.log"
    with open(log, "w") as out:      # a file, not a pipe: a survivor holding it cannot hang the test
        check = subprocess.Popen([*AT_A_TERMINAL, "-m", "tests.gpu.standin_check", str(tmp_path / "work"),
                                  str(tmp_path / "out"), str(free_port())],
                                 cwd=ROOT, env=dict(os.environ, STANDIN_PIDS=str(pids)), stdout=out,
                                 stderr=subprocess.STDOUT)
    procs = []
    try:
        def started():
            if check.poll() is not None:
                pytest.fail(f"the check ended before its case started (exit {check.returncode}):\n{log.read_text()}")
            recs = {f.name.split(".")[0]: f.read_text().split() for f in pids.iterdir() if not f.name.startswith(".")}
            return recs if {"blocker", "server"} <= set(recs) else None

        recs = wait_for(started, "the stand-in blocker and server have started")
        procs = [identity(int(pid)) for rec in recs.values() for pid in rec]
        assert all(procs) and len(procs) == 4, f"the blocker, the server and their grandchildren run: {recs}"

        check.send_signal(sig)
        check.wait(DEADLINE_S)
        # the signal has its own effect on the check (KeyboardInterrupt, SIGTERM, SIGKILL end it by that signal)
        assert check.returncode == -sig, log.read_text()
        wait_for(lambda: not running(procs), lambda: f"no survivor of {recs}: {running(procs)} still run")
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
        for pid, _ in running([p for p in procs if p]):
            os.kill(pid, signal.SIGKILL)


def test_a_finished_command_leaves_none_of_its_children(tmp_path):
    # a clean end of the group's leader (a server after its SIGINT shutdown) ends what it left running
    code = ("import subprocess, sys\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(60)'],"
            " stdout=subprocess.DEVNULL)\n"
            "print(c.pid)\n")
    r = process_groups.GROUPS.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.returncode == 0
    left = int(r.stdout)
    wait_for(lambda: identity(left) is None, f"the command's child {left} has ended")


def test_within_tied_the_signals_end_the_groups_and_after_it_are_as_before():
    with default_sigint():                        # as under a terminal, whatever started pytest
        before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        with process_groups.GROUPS.tied():
            assert all(signal.getsignal(s) is not h for s, h in before.items())
        assert {s: signal.getsignal(s) for s in before} == before


def test_within_tied_an_ignored_signal_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a command started in the background
    try:
        with process_groups.GROUPS.tied():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
