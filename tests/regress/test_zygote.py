"""The harness's children forked from a zygote (harness/zygote.py) behave as
fresh interpreters: the module's stdout, stderr and exit status as
``subprocess.run`` gives them, nothing one run changes seen by the next, a
timeout that kills the run, and nothing left behind when the caller is
killed."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from sgl_overlay.harness import zygote

pytestmark = pytest.mark.skipif(not zygote._usable(), reason="the zygote needs Linux's fork and fd passing")


def _module(tmp_path, name, body):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop(zygote.FRESH_ENV, None)
    return [sys.executable, "-P", "-m", name], env


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:                  # a zombie not yet reaped by its parent is gone too
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pid, deadline_s=120):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_run_gives_what_a_fresh_interpreter_gives(tmp_path):
    cmd, env = _module(tmp_path, "zmod", """
        import sys, json
        data = json.load(sys.stdin)
        print("to stderr", file=sys.stderr)
        print(json.dumps({"got": data, "main": __name__, "torch": "torch" in sys.modules}))
        sys.exit(data["exit"])
    """)
    for code in (0, 3):
        fresh = subprocess.run(cmd, input=f'{{"exit": {code}}}', capture_output=True, text=True, env=env)
        forked = zygote.run(cmd, input=f'{{"exit": {code}}}', env=env, timeout=300)
        assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr) == (code, "to stderr\n")
        # the same output, but for the zygote's preload: torch is imported before the module runs
        assert forked.stdout.replace('"torch": true', '"torch": false') == fresh.stdout


def test_an_uncaught_exception_is_exit_1_with_its_traceback(tmp_path):
    cmd, env = _module(tmp_path, "zboom", "raise ValueError('boom')\n")
    r = zygote.run(cmd, input="", env=env, timeout=300)
    assert r.returncode == 1 and "ValueError: boom" in r.stderr and "Traceback" in r.stderr


def test_what_one_run_changes_the_next_does_not_see(tmp_path):
    cmd, env = _module(tmp_path, "zstate", """
        import json, sys
        print(getattr(json, "SEEN", 0), "zstate_extra" in sys.modules)
        json.SEEN = 1
        sys.modules["zstate_extra"] = sys
    """)
    first = zygote.run(cmd, input="", env=env, timeout=300)
    second = zygote.run(cmd, input="", env=env, timeout=300)
    assert first.stdout == second.stdout == "0 False\n"
    assert first.returncode == second.returncode == 0


def test_a_timeout_kills_the_run_and_the_zygote_serves_the_next(tmp_path):
    pidfile = tmp_path / "pid"
    cmd, env = _module(tmp_path, "zsleep", f"""
        import os, sys, time
        if sys.stdin.read() == "sleep":
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            time.sleep(600)
        print("quick")
    """)
    zygote.run(cmd, input="", env=env, timeout=300)       # the zygote is up: the timeout below is the run's
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run(cmd, input="sleep", env=env, timeout=5)
    assert _wait_gone(int(pidfile.read_text()))
    assert zygote.run(cmd, input="", env=env, timeout=300).stdout == "quick\n"


CALLER = """
import sys
from sgl_overlay.harness import zygote
cmd = [sys.executable, "-P", "-m", "zhang"]
zygote.run(cmd, input="", timeout=600)
"""


def test_a_killed_caller_leaves_no_zygote_and_no_run(tmp_path):
    pidfile = tmp_path / "pids"
    cmd, env = _module(tmp_path, "zhang", f"""
        import os, time
        open({str(pidfile)!r}, "w").write(f"{{os.getppid()}} {{os.getpid()}}")
        time.sleep(600)
    """)
    caller = subprocess.Popen([sys.executable, "-c", CALLER], env=env)
    end = time.monotonic() + 300
    while not (pidfile.exists() and len(pidfile.read_text().split()) == 2) and time.monotonic() < end:
        assert caller.poll() is None, "the caller ended before its run started"
        time.sleep(0.1)
    zygote_pid, run_pid = map(int, pidfile.read_text().split())
    assert zygote_pid != caller.pid                        # the run is the zygote's fork, not the caller's child
    caller.send_signal(signal.SIGKILL)
    caller.wait()
    assert _wait_gone(zygote_pid) and _wait_gone(run_pid)


def test_fresh_children_on_request(tmp_path):
    cmd, env = _module(tmp_path, "zparent", "import os; print(os.getppid())\n")
    env[zygote.FRESH_ENV] = "1"
    r = zygote.run(cmd, input="", env=env, timeout=300)
    assert int(r.stdout) == os.getpid()                   # started by this process itself


def test_runs_beyond_the_cap_wait_for_a_zygote(tmp_path, monkeypatch):
    """More runs at once than the cap: each still gets its result, and no
    more than the cap of zygotes is ever alive."""
    import concurrent.futures as cf

    pool = zygote._Pool(2)
    monkeypatch.setattr(zygote, "_pool", pool)
    cmd, env = _module(tmp_path, "zcap", "import os, sys, time; time.sleep(0.2); print(sys.stdin.read())\n")
    seen = []
    real_start = zygote._Zygote

    def start(*a):
        seen.append(pool.alive)                            # counted before the start
        return real_start(*a)

    monkeypatch.setattr(zygote, "_Zygote", start)
    with cf.ThreadPoolExecutor(6) as ex:
        outs = list(ex.map(lambda i: zygote.run(cmd, input=str(i), env=env, timeout=300).stdout, range(6)))
    assert outs == [f"{i}\n" for i in range(6)]
    assert max(seen) <= 2 and pool.alive == len(pool.idle) <= 2


def test_zygotes_of_many_environments_stay_within_the_cap(tmp_path, monkeypatch):
    """A long session that runs under one environment after another (tests
    that set a variable each) keeps at most the cap alive: the longest idle
    zygote of another environment makes way, and it ends."""
    pool = zygote._Pool(2)
    monkeypatch.setattr(zygote, "_pool", pool)
    cmd, env = _module(tmp_path, "zenv", "import os; print(os.environ['ZENV'], os.getppid())\n")
    started = []
    real_start = zygote._Zygote
    monkeypatch.setattr(zygote, "_Zygote", lambda *a: started.append(real_start(*a)) or started[-1])
    zygotes = []
    for i in range(4):
        r = zygote.run(cmd, input="", env=dict(env, ZENV=str(i)), timeout=300)
        name, parent = r.stdout.split()
        assert name == str(i)                               # each run under its own environment
        zygotes.append(int(parent))
        assert pool.alive == len(pool.idle) <= 2
    assert len(set(zygotes)) == 4
    assert _wait_gone(zygotes[0]) and _wait_gone(zygotes[1])    # evicted: ended, not just forgotten
    # ... by itself, at the end of its control socket: not killed after close() gave up waiting
    # (the socket's reader kept it open, and every eviction cost close()'s whole wait)
    assert [z.proc.returncode for z in started[:2]] == [0, 0]
    for _, z in list(pool.idle):
        z.close()


def test_runs_that_differ_only_in_the_current_test_share_a_zygote(tmp_path, monkeypatch):
    """pytest names the running test in PYTEST_CURRENT_TEST: runs of successive tests
    are served by one zygote, and each sees its own value, as a fresh interpreter would."""
    pool = zygote._Pool(2)
    monkeypatch.setattr(zygote, "_pool", pool)
    cmd, env = _module(tmp_path, "zcur", "import os; print(os.environ['PYTEST_CURRENT_TEST'], os.getppid())\n")
    seen = [zygote.run(cmd, input="", env=dict(env, PYTEST_CURRENT_TEST=f"t{i} (call)"), timeout=300).stdout.split()
            for i in range(3)]
    assert [s[0] for s in seen] == ["t0", "t1", "t2"]
    assert len({s[-1] for s in seen}) == 1 and pool.alive == 1
    for _, z in list(pool.idle):
        z.close()
