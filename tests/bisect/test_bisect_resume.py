"""The log: an interrupted or crashed bisection resumes with no recorded
step repeated; --replay; a flipping test is flaky; an aborting test stops;
--runs N runs each point N times."""
import json
import signal

import pytest

from tests.bisect.scripts import calls, version_test
from tests.bisect.support import bisect, results

RANGE = ["--releases", "0.5.11..0.5.16"]          # 9 real releases, cached


@pytest.mark.parametrize("sig", ["signal.SIGINT", "signal.SIGTERM", "signal.SIGKILL"])
def test_interrupted_run_resumes_without_repeating_a_step(tmp_path, sig):
    log, seen = tmp_path / "log.jsonl", tmp_path / "calls"
    cmd = version_test(tmp_path / "t.py", seen, first_bad="0.5.13.post1", interrupt_at=3, signal=sig)
    rc, _, err = bisect(*RANGE, "--log", str(log), "--", *cmd)
    first = calls(seen)
    kept = [r["point"] for r in results(log)]
    if sig != "signal.SIGKILL":
        assert rc == 130, err
        assert f"continue with:\n  python tools/bisect.py --resume {log}" in err
    else:
        assert rc == -9
    assert len(first) == 3 and kept == first[:2]        # the interrupted step's result was not kept
    rc, data, err = bisect("--resume", str(log), "--json")
    assert rc == 0, err
    again = calls(seen)[3:]
    assert not set(again) & set(kept), (kept, again)    # nothing recorded is run again
    assert data["first_new"]["id"] == "0.5.13.post1"
    pts = [r["point"] for r in results(log)]
    assert len(pts) == len(set(pts)) == data["executions"]
    # the same answer, with the same number of executions, as an uninterrupted run
    rc, fresh, _ = bisect(*RANGE, "--log", str(tmp_path / "fresh.jsonl"), "--json",
                          "--", *version_test(tmp_path / "u.py", tmp_path / "c2", first_bad="0.5.13.post1"))
    assert fresh["executions"] == data["executions"] and fresh["first_new"] == data["first_new"]
    # a finished log resumes to its verdict without running anything
    before = len(calls(seen))
    assert bisect("--resume", str(log))[0] == 0 and len(calls(seen)) == before


def test_replay_prints_the_verdict_or_says_unfinished(tmp_path):
    log, seen = tmp_path / "log.jsonl", tmp_path / "calls"
    rc, _, _ = bisect(*RANGE, "--log", str(log), "--",
                      *version_test(tmp_path / "t.py", seen, first_bad="0.5.14", interrupt_at=2))
    assert rc == 130
    rc, data, _ = bisect("--replay", str(log), "--json")
    assert rc == 8 and data["status"] == "unfinished" and data["executions"] == 1
    assert bisect("--resume", str(log))[0] == 0
    n = len(calls(seen))
    rc, data, _ = bisect("--replay", str(log), "--json")
    assert rc == 0 and data["first_new"]["id"] == "0.5.14" and len(calls(seen)) == n


def test_a_torn_last_line_is_dropped_and_a_damaged_line_refused(tmp_path):
    log, seen = tmp_path / "log.jsonl", tmp_path / "calls"
    bisect(*RANGE, "--log", str(log), "--", *version_test(tmp_path / "t.py", seen, first_bad="0.5.14", interrupt_at=3))
    text = log.read_text()
    log.write_text(text + '{"type": "result", "point": "0.5.1')           # a crash mid-write
    rc, data, err = bisect("--resume", str(log), "--json")
    assert rc == 0, err
    assert data["first_new"]["id"] == "0.5.14"
    assert all(json.loads(l) for l in log.read_text().splitlines())      # the torn tail was cut, not extended
    lines = log.read_text().splitlines()
    lines[1] = lines[1][:20]
    log.write_text("\n".join(lines) + "\n")
    rc, _, err = bisect("--replay", str(log))
    assert rc == 2 and f"log {log}:2: not a JSON record" in err


def test_a_test_that_flips_between_runs_is_flaky(tmp_path):
    seen = tmp_path / "calls"
    rc, data, err = bisect(*RANGE, "--runs", "2", "--log", str(tmp_path / "l.jsonl"), "--json", "--",
                           *version_test(tmp_path / "t.py", seen, first_bad="0.5.14", flip=True))
    assert rc == 7, err
    assert data["verdict"] == "flaky" and data["point"]["id"] == "0.5.11" and data["runs"] == ["new", "old"]
    assert "repeated runs at 0.5.11 disagreed" in data["words"][0]


def test_runs_n_runs_every_point_n_times(tmp_path):
    seen = tmp_path / "calls"
    rc, data, err = bisect(*RANGE, "--runs", "3", "--log", str(tmp_path / "l.jsonl"), "--json", "--",
                           *version_test(tmp_path / "t.py", seen, first_bad="0.5.14"))
    assert rc == 0, err
    assert data["first_new"]["id"] == "0.5.14"
    c = calls(seen)
    assert len(c) == data["executions"] and all(c.count(v) == 3 for v in set(c))


def test_an_aborting_test_stops_the_bisection(tmp_path):
    log = tmp_path / "l.jsonl"
    rc, _, err = bisect(*RANGE, "--log", str(log), "--",
                        *version_test(tmp_path / "t.py", tmp_path / "c", first_bad="0.5.11", code=200))
    assert rc == 1
    assert "the test aborted at 0.5.11 (exit 200)" in err and f"--resume {log}" in err
    assert [r["raw"] for r in results(log)] == ["abort"]
    # fixed test, same command: the aborted point runs again, nothing else is lost
    version_test(tmp_path / "t.py", tmp_path / "c", first_bad="0.5.14")
    rc, data, err = bisect("--resume", str(log), "--json")
    assert rc == 0, err
    assert data["first_new"]["id"] == "0.5.14" and calls(tmp_path / "c")[:2] == ["0.5.11", "0.5.11"]


def test_skip_exit_code_is_a_skip_never_bad(tmp_path):
    rc, data, err = bisect(*RANGE, "--log", str(tmp_path / "l.jsonl"), "--json", "--",
                           *version_test(tmp_path / "t.py", tmp_path / "c", first_bad="0.5.14",
                                         skip=["0.5.13.post1", "0.5.14"]))
    assert rc == 6, err
    assert data["verdict"] == "inconclusive"
    assert data["last_old"]["id"] == "0.5.13" and data["first_new"]["id"] == "0.5.15"
    assert [s["id"] for s in data["skipped"]] == ["0.5.13.post1", "0.5.14"]


def test_ctrl_c_stops_the_running_tests_at_once(tmp_path):
    """With --jobs 2, two tests run; Ctrl-C ends both (their process
    groups), records nothing for them, and exits 130 within seconds."""
    import os
    import subprocess
    import sys
    import time
    from tests.bisect.support import BISECT
    pids = tmp_path / "pids"
    script = tmp_path / "slow.sh"
    script.write_text(f'echo $$ >> "{pids}"\nsleep 60\n')
    log = tmp_path / "log.jsonl"
    p = subprocess.Popen([sys.executable, str(BISECT), *RANGE, "--jobs", "2", "--log", str(log), "--",
                          "sh", str(script), "{tree}"], stderr=subprocess.PIPE, text=True)
    for _ in range(300):
        if pids.exists() and len(pids.read_text().split()) == 2:
            break
        time.sleep(0.1)
    started = [int(x) for x in pids.read_text().split()]
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=30)[1]
    assert p.returncode == 130 and time.monotonic() - t0 < 15, err
    assert results(log) == []
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_run_past_timeout_is_untestable_not_bad(tmp_path):
    script = tmp_path / "slow.sh"
    script.write_text("sleep 30\n")
    rc, data, err = bisect("--releases", "0.5.13..0.5.14", "--timeout", "1", "--log", str(tmp_path / "l.jsonl"),
                           "--json", "--", "sh", str(script), "{tree}")
    assert rc == 6, err
    assert data["verdict"] == "inconclusive" and data["endpoint"]["id"] == "0.5.13"
    assert [s["result"] for s in data["steps"]] == ["skip", "skip"]
    assert "timed out after 1.0 s" in data["words"][1]
