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
    groups) without waiting for them, records nothing for them, and exits
    130.  The tests would run for an hour: bisect ending within the
    deadline, with both gone, is the proof that it stopped them."""
    import os
    import subprocess
    from tests.bisect.support import bisect_argv
    pids = tmp_path / "pids"
    script = tmp_path / "slow.sh"
    script.write_text(f'echo $$ >> "{pids}"\nexec sleep 3600\n')
    log = tmp_path / "log.jsonl"
    p = subprocess.Popen(bisect_argv(*RANGE, "--jobs", "2", "--log", str(log), "--", "sh", str(script), "{tree}"),
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, p, "both endpoint tests to start")
        started = [int(x) for x in pids.read_text().split()]
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=DEADLINE)[1]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert results(log) == []
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


DEADLINE = 600                      # seconds: generous for a loaded machine; no test waits for it to pass


def wait_for(ready, proc, what):
    """Wait until ``ready()``, while ``proc`` runs, up to DEADLINE seconds."""
    import time
    end = time.monotonic() + DEADLINE
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"bisect ended (exit {proc.returncode}) before {what}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > end:
            pytest.fail(f"no {what} within {DEADLINE} s")
        time.sleep(0.05)


def test_a_run_past_timeout_is_untestable_not_bad(tmp_path):
    script = tmp_path / "slow.sh"
    script.write_text("sleep 30\n")
    rc, data, err = bisect("--releases", "0.5.13..0.5.14", "--timeout", "1", "--log", str(tmp_path / "l.jsonl"),
                           "--json", "--", "sh", str(script), "{tree}")
    assert rc == 6, err
    assert data["verdict"] == "inconclusive" and data["endpoint"]["id"] == "0.5.13"
    assert [s["result"] for s in data["steps"]] == ["skip", "skip"]
    assert "timed out after 1.0 s" in data["words"][1]


# A log as the code before the typed records (commit 0038906) wrote it: the start
# record, three results, and (finished) the verdict record, key for key.
OLD_POINTS = ["0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1",
              "0.5.16"]
OLD_RESULTS = [
    {"batch": 1, "code": 0, "notes": {}, "output": "", "phase": "endpoints", "point": "0.5.11", "raw": "pass",
     "run": 1, "seconds": 0.15, "summary": "", "term": "old", "type": "result"},
    {"batch": 2, "code": 1, "notes": {}, "output": "", "phase": "endpoints", "point": "0.5.16", "raw": "fail",
     "run": 1, "seconds": 0.17, "summary": "", "term": "new", "type": "result"},
    {"batch": 3, "code": 0, "notes": {}, "output": "", "phase": "bisect", "point": "0.5.13.post1", "raw": "pass",
     "run": 1, "seconds": 0.14, "summary": "", "term": "old", "type": "result"},
]


def old_start(command):
    from tests.bisect.support import ROOT
    return {"cache": None, "fixed": False, "jobs": 1,
            "range": {"extra_old": [], "kind": "releases", "notes": [], "repo": "",
                      "points": [{"id": v, "label": f"sglang {v}", "ref": v} for v in OLD_POINTS]},
            "runs": 1, "schema": 1, "stack_digest": None, "stack_root": str(ROOT),
            "test": {"command": command, "scenario": None, "timeout": None}, "tool_version": "0.1.0",
            "tree_cache": None, "tree_cache_mb": 8192, "type": "start", "with_stack": False}


def test_a_log_the_previous_code_wrote_resumes_and_replays(tmp_path):
    log, seen = tmp_path / "log.jsonl", tmp_path / "calls"
    cmd = version_test(tmp_path / "t.py", seen, first_bad="0.5.14")
    log.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in [old_start(cmd), *OLD_RESULTS]))
    rc, data, err = bisect("--replay", str(log), "--json")
    assert rc == 8 and data["executions"] == 3 and data["next"] == ["0.5.15"], err
    rc, data, err = bisect("--resume", str(log), "--json")
    assert rc == 0, err
    assert calls(seen) == ["0.5.15", "0.5.14"]                  # the three kept results are not run again
    assert data["verdict"] == "first-bad" and data["executions"] == 5
    assert data["last_old"] == {"id": "0.5.13.post1", "label": "sglang 0.5.13.post1", "ref": "0.5.13.post1"}
    assert [(s["point"], s["seconds"]) for s in data["steps"][:3]] == [(r["point"], r["seconds"]) for r in OLD_RESULTS]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[1:4] == OLD_RESULTS                              # kept as they were
    assert [sorted(r) for r in lines[4:6]] == [sorted(OLD_RESULTS[0])] * 2   # new results in the same format
    assert lines[-1]["type"] == "verdict" and lines[-1]["words"] == ["first bad: 0.5.14; last good before it: 0.5.13.post1"]


def test_a_verdict_the_previous_code_wrote_is_replayed_as_written(tmp_path):
    log = tmp_path / "log.jsonl"
    steps = [{"label": f"sglang {r['point']}", "phase": r["phase"], "point": r["point"], "result": r["raw"],
              "seconds": r["seconds"], "term": r["term"]} for r in OLD_RESULTS]
    verdict = {"type": "verdict", "verdict": "cannot-reproduce", "executions": 3, "fixed": False, "steps": steps,
               "endpoint": {"id": "0.5.16", "label": "sglang 0.5.16", "ref": "0.5.16"},
               "words": ["cannot reproduce: as the log says", "the test at 0.5.16 said: "]}
    log.write_text("".join(json.dumps(r, sort_keys=True) + "\n"
                           for r in [old_start(["true", "{tree}"]), *OLD_RESULTS, verdict]))
    rc, data, err = bisect("--replay", str(log), "--json")
    assert rc == 5, err
    # the record as written (its "type" too), in the --json envelope (docs/json.md)
    assert data == {"status": "done", "log": str(log), **verdict, "schema": 1, "exit_code": 5}
    import subprocess
    from tests.bisect.support import bisect_argv
    p = subprocess.run(bisect_argv("--replay", str(log)), capture_output=True, text=True, timeout=DEADLINE)
    assert p.returncode == 5 and p.stdout.startswith("cannot reproduce: as the log says\n")
    assert "3 test execution(s) over 9 point(s):" in p.stdout
