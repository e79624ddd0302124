"""Two (four) processes at once: apply.py on one destination, release_tree
for the same and different releases, two bisects on one log, a scratch
folder cleaned by another process while its maker takes its marker."""
import json
import os
import re
import subprocess
import sys
import time

from sgl_overlay import archive, artifacts, builder, gitcmd
from tests.apply.support import ROOT, Project
from tests.bisect.scripts import version_test
from tests.reliability.support import local_index_env, record, start_together, tool, tree_digest

LOCK_ERROR = re.compile(r"^error: the build of (\S+) is held by pid (\d+) \(lock (\S+)\)$", re.M)
NOTE = "python/sglang/sgl_overlay_round.py"


def _verified(project):
    """The destination is a complete build of the current stack: manifest,
    HEAD, clean tree (apply.py's own up-to-date check), no scratch dirs."""
    p = project.apply("-q")
    assert p.returncode == 0 and "up to date" in p.stdout, p.stderr
    data = builder.read_manifest(project.out)
    assert gitcmd.out(project.out, "rev-parse", "HEAD") == data["head"]
    assert not list(project.out.parent.glob(".sglang.tmp-*"))
    return data


def test_four_applies_on_one_destination_20_rounds(tmp_path):
    project = Project(tmp_path / "proj", (ROOT / "upstream.lock").read_text())
    runs = failures = 0
    for rnd in range(20):
        if rnd % 5 == 0:                       # a new stack: these rounds really build (and swap)
            project.overlay(NOTE, f"ROUND = {rnd}\n")
        wait = ["--wait", "300"] if rnd % 2 else []           # odd rounds: all must succeed
        cmd = [sys.executable, str(ROOT / "tools" / "apply.py"), "--root", str(project.root),
               "--out", str(project.out), *wait]
        done = start_together([cmd] * 4)
        for rc, out, err in done:
            runs += 1
            assert "Traceback" not in err + out
            if rc == 0:
                continue
            m = LOCK_ERROR.search(err)
            ok = rc == 2 and not wait and m and m.group(1) == str(project.out)
            failures += not ok
            assert ok, (rnd, rc, err)
        assert any(rc == 0 for rc, _, _ in done)
        if wait:
            assert all(rc == 0 for rc, _, _ in done), done
        data = _verified(project)
        assert f"ROUND = {rnd - rnd % 5}" in (project.out / NOTE).read_text()
        assert data["overlay"] == [NOTE]
    record("4 concurrent apply.py on one destination (20 rounds, 4 of them real builds)", runs, failures)


RELEASES = ["0.5.8", "0.5.9"]
GET = "import sys; from sgl_overlay import release_trees\n" \
      "for v in sys.argv[1:]:\n" \
      "    print(release_trees.release_tree(v, progress=lambda m: print(m, file=sys.stderr, flush=True)))\n"


def _failed(cmds, done):
    """Each failing process's exit code and whole stderr, one block each:
    pytest shows a string message in full, but shortens the repr of
    anything else (a list of outputs) to a few hundred characters."""
    return "\n".join(f"--- process {i} ({' '.join(map(str, cmd))}) exited {rc}; its whole stderr:\n{err}"
                     for i, (cmd, (rc, _, err)) in enumerate(zip(cmds, done)) if rc != 0)


def test_release_tree_from_four_processes_downloads_each_release_once(tmp_path):
    cache = tmp_path / "cache"
    env = local_index_env(cache, RELEASES)
    orders = [RELEASES, RELEASES[::-1], [RELEASES[0]], RELEASES]       # the same and different releases
    done = start_together([[sys.executable, "-c", GET, *o] for o in orders], env=env, cwd=tmp_path)
    assert all(rc == 0 for rc, _, _ in done), _failed(orders, done)
    errs = "".join(e for _, _, e in done)
    assert "Traceback" not in errs
    for v in RELEASES:
        assert errs.count(f"downloading sglang {v} with pip") == 1, errs
        assert errs.count(f"unpacking sglang-{v}-") == 1, errs
    # every tree is exactly its archive's sglang/, and every process got the same path
    for v in RELEASES:
        tree = cache / "releases" / v
        art = next((cache / "artifacts").glob(f"sglang-{v}-*.whl"))
        want = {rel: __import__("hashlib").sha256(read()).hexdigest() for rel, read in archive.iter_members(art, "sglang")}
        got = tree_digest(tree / "sglang")
        assert got == want
        assert artifacts.sha256_file(art) == (art.parent / (art.name + ".sha256")).read_text().split()[0]
    assert not [p for p in (cache / "artifacts").iterdir() if p.name.startswith(".download-")]
    assert not [p for p in (cache / "releases").iterdir() if p.is_dir() and p.name.startswith(".")]
    record("release_tree from 4 processes (2 releases, same and different)", 4, 0, downloads=2)


RANGE = ["--releases", "0.5.11..0.5.16"]


def _bisect(log, test, *extra):
    return [sys.executable, str(ROOT / "tools" / "bisect.py"), *RANGE, "--log", str(log), *extra, "--", *test]


def test_two_bisects_on_one_log_and_a_resume_of_a_live_log(tmp_path):
    log, go = tmp_path / "log.jsonl", tmp_path / "go"
    slow = version_test(tmp_path / "t.py", tmp_path / "calls", first_bad="0.5.13.post1")
    # the first bisect's test holds until both refusals are done (the file `go`), so it is
    # still writing the log while they run, however slow the machine (600 s at most)
    slow = [sys.executable, "-c", "import os, subprocess, sys, time\nend = time.monotonic() + 600\n"
                                  "while not os.path.exists(sys.argv[1]) and time.monotonic() < end: time.sleep(0.05)\n"
                                  "sys.exit(subprocess.call(sys.argv[2:]))", str(go), *slow]
    first = subprocess.Popen(_bisect(log, slow, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 600
    while not log.exists():
        assert first.poll() is None and time.monotonic() < end, first.stderr.read() if first.poll() is not None else ""
        time.sleep(0.05)
    refused = []
    try:
        for cmd in (_bisect(log, slow), tool("bisect", "--resume", log)):
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            refused.append(p)
    finally:
        go.write_text("")
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    verdict = json.loads(out)
    failures = 0
    for p in refused:
        ok = p.returncode == 2 and f"error: the bisection log {log} is held by pid {first.pid}" in p.stderr \
            and "Traceback" not in p.stderr
        failures += not ok
        assert ok, p.stderr
    points = [r["point"] for r in map(json.loads, log.read_text().splitlines()) if r["type"] == "result"]
    assert len(points) == len(set(points)) == verdict["executions"]
    # once the owner has ended, --resume takes the log (finished: prints the verdict, runs nothing)
    p = subprocess.run(tool("bisect", "--resume", log), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    record("a second bisect on the same --log, and --resume of a live log", 2, failures)


CLEAN = "import sys; from sgl_overlay import locking\n" \
        "print(len(locking.clean_scratch(sys.argv[1], sys.argv[2])))\n"


def test_a_scratch_folder_is_never_cleaned_while_its_maker_is_taking_its_marker(tmp_path, monkeypatch):
    """Another process's clean_scratch, run at the moment the maker has
    created its marker file and not yet locked it (the CI failure: a
    concurrent download of another release removed a live `.download-*`
    folder), leaves the folder alone; after the maker ends, it is removed.
    The moment is made by a hook, not by timing."""
    from sgl_overlay import locking
    cleaned = []
    real_open = locking._open

    def open_then_clean(path):
        fd = real_open(path)                   # the marker file exists now, unlocked
        p = subprocess.run([sys.executable, "-c", CLEAN, str(tmp_path), ".download-*"],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        cleaned.append(int(p.stdout))
        return fd

    monkeypatch.setattr(locking, "_open", open_then_clean)
    d, mark = locking.scratch(tmp_path, ".download-")
    monkeypatch.setattr(locking, "_open", real_open)
    assert cleaned == [0] and d.is_dir(), f"another process's clean_scratch removed the live folder {d}"
    assert sorted(os.listdir(d)) == [locking.MARK]
    assert not locking.is_free(d / locking.MARK)         # the lock moved with the renamed marker
    assert locking.clean_scratch(tmp_path, ".download-*") == [] and d.is_dir()
    mark.release()                                        # its maker is gone: the folder is a leftover
    assert locking.clean_scratch(tmp_path, ".download-*") == [d] and not d.exists()


def test_an_unmarked_scratch_folder_is_removed_once_the_pid_in_its_name_is_gone(tmp_path):
    """A maker killed between mkdtemp and its marker (CI: kill -9 in
    stack.py refresh at 0.456 s left a `.patches.tmp-*` folder for the
    next run) leaves a folder without a marker: removed by the next clean
    once no process has the pid in its name; kept while one has (its
    maker may be about to lock its marker), and kept when the name has no
    pid (a folder of an older version, until the grace has passed)."""
    from sgl_overlay import locking
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                           # reaped: its pid is no process now
    gone = tmp_path / f".patches.tmp-{dead.pid}.abcd1234"
    alive = tmp_path / f".patches.tmp-{os.getppid()}.efgh5678"
    unnamed = tmp_path / ".patches.tmp-abcd1234"
    for d in (gone, alive, unnamed):
        d.mkdir()
    assert locking.clean_scratch(tmp_path, ".patches.tmp-*") == [gone]
    assert not gone.exists() and alive.is_dir() and unnamed.is_dir()
    d, mark = locking.scratch(tmp_path, ".patches.tmp-")
    assert locking.MAKER.search(d.name).group(1) == str(os.getpid())   # scratch puts its pid in the name
    mark.release()
