"""kill -9 at random moments (seed 18) in apply.py, a bisect step, a
cache download and stack.py refresh: the next run of the same command
completes with the same result as an undisturbed run, and nothing
half-written is ever used."""
import json
import shutil
import subprocess
import sys

from sgl_overlay import artifacts, builder, gitcmd
from tests.apply.support import SIZING, ROOT, Project
from tests.bisect.scripts import version_test
from tests.reliability.support import (kill_after, local_index_env, moments, record, timed, tool,
                                       tree_digest)

NOTE = "python/sglang/sgl_overlay_kill.py"


def _apply(project, *args, **kw):
    return [sys.executable, str(ROOT / "tools" / "apply.py"), "--root", str(project.root),
            "--out", str(project.out), "-q", *args]


def _state(dest):
    """None (no tree), or the HEAD of a complete, clean build."""
    if not dest.exists():
        return None
    data = builder.read_manifest(dest)
    assert data is not None, "a destination without a manifest"
    assert gitcmd.out(dest, "rev-parse", "HEAD") == data["head"]
    assert gitcmd.out(dest, "status", "--porcelain") == ""
    return data["head"]


def test_apply_killed_at_random_moments(tmp_path):
    project = Project(tmp_path / "proj", (ROOT / "upstream.lock").read_text())
    heads, took = {}, 0.0
    for v in ("a", "b"):                                  # the undisturbed results
        project.overlay(NOTE, f"V = {v!r}\n")
        p, t = timed(_apply(project))
        assert p.returncode == 0, p.stderr
        heads[v], took = _state(project.out), max(took, t)
    failures = 0
    samples = moments(8, took)
    for i, delay in enumerate(samples):
        old, new = ("a", "b") if i % 2 == 0 else ("b", "a")   # every run replaces the other build
        project.overlay(NOTE, f"V = {new!r}\n")
        rc, err = kill_after(_apply(project), delay)
        assert "Traceback" not in err
        # at any moment: the old build, the new one, or (fallback swap only) none; never a half tree
        assert _state(project.out) in (heads[old], heads[new], None)
        p = subprocess.run(_apply(project), capture_output=True, text=True, timeout=600)
        ok = p.returncode == 0 and _state(project.out) == heads[new] \
            and not list(project.out.parent.glob(".sglang.tmp-*"))
        failures += not ok
        assert ok, (delay, p.returncode, p.stderr, _state(project.out), heads, new,
                    [(x, sorted(y.name for y in x.iterdir())) for x in project.out.parent.glob(".sglang.tmp-*")])
    record("kill -9 in apply.py (a rebuild over the other build)", len(samples), failures,
           moments=samples, undisturbed_s=round(took, 2))


GET = "import sys; from sgl_overlay import release_trees; print(release_trees.release_tree(sys.argv[1]))"


def test_cache_download_killed_at_random_moments(tmp_path):
    version = "0.5.9"
    ref = tmp_path / "ref"
    p, took = timed([sys.executable, "-c", GET, version], env=local_index_env(ref))
    assert p.returncode == 0, p.stderr
    want = tree_digest(ref / "releases" / version)
    failures = 0
    samples = moments(8, took)
    for i, delay in enumerate(samples):
        cache = tmp_path / f"c{i}"
        env = local_index_env(cache)
        kill_after([sys.executable, "-c", GET, version], delay, env=env)
        # nothing half-written under a final name: an artifact is whole (its sha256 beside it), a tree is whole
        art = list((cache / "artifacts").glob("sglang-*.whl")) if (cache / "artifacts").exists() else []
        for a in art:
            assert artifacts.sha256_file(a) == (a.parent / (a.name + ".sha256")).read_text().split()[0]
        tree = cache / "releases" / version
        if tree.exists():
            assert tree_digest(tree) == want
        p = subprocess.run([sys.executable, "-c", GET, version], env=env, capture_output=True, text=True, timeout=600)
        ok = p.returncode == 0 and tree_digest(tree) == want and \
            not [x for x in (cache / "artifacts").iterdir() if x.name.startswith(".download-")] and \
            not [x for x in (cache / "releases").iterdir() if x.is_dir() and x.name.startswith(".")]
        failures += not ok
        assert ok, (delay, p.stderr)
        shutil.rmtree(cache)
    record("kill -9 in a cache download + unpack (release_tree)", len(samples), failures,
           moments=samples, undisturbed_s=round(took, 2))


RANGE = ["--releases", "0.5.11..0.5.16"]


def test_bisect_killed_at_random_moments(tmp_path):
    def run(log, calls):
        test = version_test(tmp_path / "t.py", calls, first_bad="0.5.13.post1")
        return tool("bisect", *RANGE, "--log", log, "--json", "-q", "--", *test)
    p, took = timed(run(tmp_path / "ref.jsonl", tmp_path / "ref-calls"))
    assert p.returncode == 0, p.stderr
    want = json.loads(p.stdout)
    failures = 0
    samples = moments(6, took)
    for i, delay in enumerate(samples):
        log = tmp_path / f"l{i}.jsonl"
        kill_after(run(log, tmp_path / f"c{i}"), delay)
        again = tool("bisect", "--resume", log, "--json", "-q") if log.exists() else run(log, tmp_path / f"c{i}")
        p = subprocess.run(again, capture_output=True, text=True, timeout=600)
        got = json.loads(p.stdout) if p.returncode == 0 else {}
        points = [r["point"] for r in map(json.loads, log.read_text().splitlines()) if r["type"] == "result"]
        ok = p.returncode == 0 and got["first_new"] == want["first_new"] and \
            got["executions"] == want["executions"] and len(points) == len(set(points))
        failures += not ok
        assert ok, (delay, p.returncode, p.stderr)
    record("kill -9 in bisect.py (then --resume)", len(samples), failures, moments=samples,
           undisturbed_s=round(took, 2))


def test_stack_refresh_killed_at_random_moments(tmp_path, patches):
    project = Project(tmp_path / "proj", (ROOT / "upstream.lock").read_text())
    one, c1 = patches.make([(SIZING, "import logging\n", "import logging  # one\n")], subject="One")
    two, _ = patches.make([(SIZING, "import logging  # one\n", "import logging  # two\n")], subject="Two", on=c1)
    project.series(["one.patch", "two.patch"], {"one.patch": one, "two.patch": two})
    assert project.apply("-q").returncode == 0
    # the tree is edited: a third commit, and the first one's message reworded
    (project.out / SIZING).write_text((project.out / SIZING).read_text().replace("# two", "# three"))
    gitcmd.run(project.out, "commit", "--quiet", "-am", "Three\n\nA third change.\n\nUpstream-Status: Pending\nTopic: test\n")
    before = tree_digest(project.root / "patches")
    saved = tmp_path / "saved-patches"
    shutil.copytree(project.root / "patches", saved)
    cmd = tool("stack", "refresh", "--tree", project.out, "--root", project.root, "-q")
    p, took = timed(cmd)
    assert p.returncode == 0, p.stderr
    after = tree_digest(project.root / "patches")
    assert after != before
    failures = 0
    samples = moments(10, took)
    for delay in samples:
        shutil.rmtree(project.root / "patches")
        shutil.copytree(saved, project.root / "patches")
        kill_after(cmd, delay)
        assert tree_digest(project.root / "patches") in (before, after)       # never a mix
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        ok = p.returncode == 0 and tree_digest(project.root / "patches") == after and \
            not list(project.root.glob(".patches.tmp-*"))
        failures += not ok
        assert ok, (delay, p.returncode, p.stderr, sorted(x.name for x in project.root.glob(".patches.tmp-*")))
    record("kill -9 in stack.py refresh", len(samples), failures, moments=samples, undisturbed_s=round(took, 2))
