"""tools/stack.py port on the real releases: a checkout with three real
patches of the project's earlier pin, v0.5.12.post1 (kept as they were in
tests/stack/port_data/v0.5.12.post1 with that pin's lock, so the port has
real work to do now that the project's own pin is v0.5.17) (float32-draft-embeddings and float32-gdn-chunk
apply by 3-way merge on v0.5.17; sm120-kernel-tables conflicts there:
v0.5.13 added its own SM120 DeepGEMM check, 524ba10eda #24692, on the lines
the patch changes), ported from the pin onto v0.5.17.

The new lock needs SGLang's tags: a local upstream whose tags v0.5.12.post1
and v0.5.17 hold the two releases' real trees (from their wheels), built
once into the tests' cache, so no test here needs the network beyond
pip's fetch of the two wheels into that cache.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_overlay import base_tree, gitcmd, locking, lock as lockmod, project, release_trees, series, stack
from sgl_overlay.errors import IntegrityError, UsageError
from sgl_overlay.stack import port
from sgl_overlay.stack.classify import Status
from sgl_overlay.stack.rebase import Attempt
from tests.apply.support import ROOT

STACK = ROOT / "tools" / "stack.py"
APPLY = ROOT / "tools" / "apply.py"
VERSIONS = ("0.5.12.post1", "0.5.17")
CLANG = {"srt/mem_cache/cpp_radix_tree/.clang-format": "../../../../../sgl-kernel/.clang-format"}
CONFLICT = "sm120-kernel-tables.patch"
CONFIGURER = "python/sglang/srt/layers/deep_gemm_wrapper/configurer.py"
SERIES = """# three real patches of this repository
# -- Topic: ddtree
float32-draft-embeddings.patch

# -- Topic: sm120
sm120-kernel-tables.patch

# -- Topic: ddtree, again
float32-gdn-chunk.patch
"""
NAMES = ("float32-draft-embeddings.patch", "sm120-kernel-tables.patch", "float32-gdn-chunk.patch")
OLD_PIN = Path(__file__).parent / "port_data" / "v0.5.12.post1"


# --------------------------------------------------------------------------
# fixtures and helpers

@pytest.fixture(scope="module")
def upstream():
    """A git repository whose tags hold the real release trees, kept in the
    tests' cache (its clone there is then reused too)."""
    cache = Path(os.environ[project.CACHE_ENV])
    repo = cache / ("port-upstream-" + "-".join(VERSIONS))
    with locking.cache_entry(cache / f".{repo.name}.lock", f"the test upstream {repo}"):
        if not repo.exists():
            tmp = Path(str(repo) + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            for version in VERSIONS:
                d = cache / f".port-base-{version}"
                shutil.rmtree(d, ignore_errors=True)
                base_tree.base_from_release(version, d, symlinks=CLANG)
                if not tmp.exists():
                    gitcmd.run(None, "clone", "-q", str(d), str(tmp))
                else:
                    gitcmd.run(tmp, "fetch", "-q", str(d), "upstream")
                    tree = gitcmd.out(tmp, "rev-parse", "FETCH_HEAD^{tree}")
                    c = gitcmd.out(tmp, "commit-tree", tree, "-p", "HEAD", "-m", f"release {version}",
                                   env={"GIT_AUTHOR_DATE": "2026-12-01T00:00:00+00:00",
                                        "GIT_COMMITTER_DATE": "2026-12-01T00:00:00+00:00"})
                    gitcmd.run(tmp, "reset", "-q", "--hard", c)
                gitcmd.run(tmp, "tag", f"v{version}")
                shutil.rmtree(d)
            os.rename(tmp, repo)
    return repo


def make_checkout(dest):
    """A second checkout: the old pin's lock, an empty overlay, its three
    real patches."""
    (dest / "patches").mkdir(parents=True)
    (dest / "overlay").mkdir()
    shutil.copy(OLD_PIN / "upstream.lock", dest / "upstream.lock")
    for name in NAMES:
        shutil.copy(OLD_PIN / name, dest / "patches" / name)
    (dest / "patches" / "series").write_text(SERIES)
    return dest


def run(root, *args, tool=STACK, timeout=900):
    # run from a folder that holds no test folder: the tool shows a path inside the current directory
    # relative to it (commands.stack.shown), and the tests' folders may lie in this checkout's build/
    p = subprocess.run([sys.executable, str(tool), *args, "--root", str(root)], capture_output=True, text=True,
                       timeout=timeout, cwd=Path(__file__).parent)
    p.data = json.loads(p.stdout) if "--json" in args and p.stdout.strip().startswith("{") else None
    return p


def port_run(root, *args):
    return run(root, "port", *args)


def start(root, upstream, *more):
    return port_run(root, "--onto", "0.5.17", "--repo", str(upstream), *more)


def hashes(root):
    """sha256 of every file of patches/ and of upstream.lock."""
    files = sorted(p for p in (root / "patches").rglob("*") if p.is_file()) + [root / "upstream.lock"]
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def normalized_hashes(root):
    """As hashes(), each patch without its From <commit> line (a commit id
    changes with the time git am --continue ran; nothing else does)."""
    return {k: hashlib.sha256(series.normalized((root / k).read_bytes())).hexdigest() if k.endswith(".patch")
            else v for k, v in hashes(root).items()}


def tree_of(root):
    return root / "build" / "port" / "tree"


def take_the_patch_side(path):
    """The hand resolution: each conflict block becomes the patch's side
    (the lines between ======= and >>>>>>>)."""
    out, side = [], None
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            side = "upstream"
        elif line.startswith("=======") and side == "upstream":
            side = "patch"
        elif line.startswith(">>>>>>> ") and side == "patch":
            side = None
        elif side != "upstream":
            out.append(line)
    path.write_text("".join(out))


def git(tree, *args):
    """git as the person runs it in the session tree (an identity of its own)."""
    return gitcmd.run(tree, *args, env={"GIT_COMMITTER_NAME": "A Person", "GIT_COMMITTER_EMAIL": "a@example.com",
                                        "GIT_AUTHOR_NAME": "A Person", "GIT_AUTHOR_EMAIL": "a@example.com"})


def stopped_at_the_conflict(root, upstream):
    r = start(root, upstream)
    assert r.returncode == 1, r.stdout + r.stderr
    return r


def applies_to_pristine(patch_file, version):
    """The oracle, apart from stack.py: plain `git apply --check` of the
    patch on the release's own files (-p2: a/python/sglang/... is sglang/...)."""
    release = release_trees.release_tree(version)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(Path(release).parent))
    return subprocess.run(["git", "apply", "--check", "-p2", str(patch_file)], cwd=release,
                          capture_output=True, text=True, env=env).returncode == 0


# --------------------------------------------------------------------------
# the session on real releases

def test_a_conflict_stops_with_markers_and_continue_finishes_the_move(tmp_path, upstream):
    root = make_checkout(tmp_path / "proj")
    before = hashes(root)
    r = stopped_at_the_conflict(root, upstream)
    # the report: the patch, apply.py's failure report, the conflicted file, the next steps
    out = r.stdout
    assert out.splitlines()[0] == f"port v0.5.12.post1 -> v0.5.17 ({root / 'build' / 'port'}): stopped"
    assert f" 2 {CONFLICT}" in out and "conflict: waiting for you" in out
    assert f"file: {CONFIGURER}" in out and "context not found:" in out and "nearest place:" in out
    assert f"conflicted files (markers in place in {tree_of(root)}):\n  {CONFIGURER}" in out
    assert f"git -C {tree_of(root)} add FILE" in out and f"git -C {tree_of(root)} am --continue" in out
    for verb in ("--continue", "--skip --reason", "--abort"):
        assert f"python tools/stack.py port --root {root} {verb}" in out
    # git am's stopped state and the markers are in the tree; patches/ and the lock untouched
    tree = tree_of(root)
    text = (tree / CONFIGURER).read_text()
    assert "<<<<<<< " in text and "\n=======\n" in text and ">>>>>>> " in text
    assert (tree / ".git" / "rebase-apply").is_dir()
    assert hashes(root) == before
    st = port_run(root, "--status", "--json")
    assert st.returncode == 1 and st.data["phase"] == "stopped"          # it waits for the person
    assert st.data["stop"]["patch"] == CONFLICT and st.data["stop"]["conflicted"] == [CONFIGURER]
    assert [(p["patch"], p["status"]) for p in st.data["patches"]] == [(NAMES[0], "applied-3way")]

    # --continue with the markers still there: refused, naming the file
    c = port_run(root, "--continue")
    assert c.returncode == 2 and CONFIGURER in c.stderr and "unmerged" in c.stderr
    take_the_patch_side(tree / CONFIGURER)
    c = port_run(root, "--continue")
    assert c.returncode == 2 and CONFIGURER in c.stderr            # resolved in the file, not yet added

    # the person commits (git am's state still there), and adds a commit of their own after it,
    # first without the trailers the series requires
    git(tree, "add", CONFIGURER)
    git(tree, "commit", "-q", "-C", st.data["stop"]["old_commit"])
    (tree / "python/sglang/srt/layers/deep_gemm_wrapper/sm12x.py").write_text("SM12X_MAJOR = 12\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "sm120: one constant for SM12x\n\nThe major the tables test, named once.\n")
    c = port_run(root, "--continue")
    assert c.returncode == 2 and "Upstream-Status" in c.stderr and "commit --amend" in c.stderr, c.stderr
    git(tree, "commit", "-q", "--amend", "-m", "sm120: one constant for SM12x\n\nThe major the tables test, "
        "named once.\n\nUpstream-Status: Pending\nTopic: sm120\n")
    assert hashes(root) == before

    done = port_run(root, "--continue")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / ".git" / "rebase-apply").exists() is False          # git am --quit, HEAD kept
    r = port_run(root, "--status", "--json").data
    assert r["status"] == "finished" and r["phase"] == "done"
    got = [(p["patch"], p["status"], p["resolution"]) for p in r["patches"]]
    assert got == [(NAMES[0], "applied-3way", "git"), (CONFLICT, "conflict", "person"),
                   (NAMES[2], "applied-3way", "git")]
    added = "sm120-one-constant-for-sm12x.patch"
    assert r["written"]["added"] == [added]
    assert [c["name"] for c in r["patches"][1]["commits"]] == [CONFLICT, added]

    # patches/: the refreshed patch carries the resolution and applies to pristine v0.5.17 with plain git apply
    new = (root / "patches" / CONFLICT).read_text()
    assert "-    if sm_version == 120:\n" in new and "+    if _is_cuda and sm_version // 10 == 12:\n" in new
    assert applies_to_pristine(root / "patches" / CONFLICT, "0.5.17")
    assert not applies_to_pristine(OLD_PIN / CONFLICT, "0.5.17")
    # the new patch is in the series right after the one it was committed after
    assert (root / "patches" / "series").read_text() == SERIES.replace(
        "sm120-kernel-tables.patch\n", f"sm120-kernel-tables.patch\n{added}\n")
    assert run(root, "lint").returncode == 0

    # upstream.lock: v0.5.17, every field as new_lock computes it, and facts checked apart from it
    lock = lockmod.load(root / "upstream.lock")
    want = stack.new_lock(lockmod.load(OLD_PIN / "upstream.lock"), stack.Onto(version="0.5.17", repo=str(upstream)))
    assert lock.as_dict() | {"path": ""} == want.as_dict() | {"path": ""}
    assert lock.version == "0.5.17" and lock.commit == gitcmd.out(upstream, "rev-parse", "v0.5.17")
    assert lock.tree == gitcmd.out(upstream, "rev-parse", "v0.5.17:python/sglang")
    wheel = Path(os.environ[project.CACHE_ENV]) / "artifacts" / lock.artifact_filename
    assert lock.artifact_sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    # and the new lock with the new series builds: the real builder, the artifact proven against the lock
    b = run(root, "--check", tool=APPLY)
    assert b.returncode == 0, b.stdout + b.stderr

    # the per-patch range-diff: printed at the end, kept in build/port/range-diff.txt
    saved = (root / "build" / "port" / "range-diff.txt").read_text()
    for i, name in enumerate(NAMES, 1):
        assert series.parse_patch(OLD_PIN / name, i).subject in saved
    assert "sm120: one constant for SM12x" in saved                  # the new patch, with no old one
    printed = done.stdout
    assert "range-diff (old v0.5.12.post1 series against the new one" in printed
    conflict = next(p for p in r["patches"] if p["patch"] == CONFLICT)
    assert conflict["range_diff"][0].startswith("2:") and " ! " in conflict["range_diff"][0]
    assert any("if sm_version == 120:" in line for line in conflict["range_diff"])
    for line in conflict["range_diff"][:3]:
        assert line in printed


def test_abort_leaves_patches_and_the_lock_byte_for_byte(tmp_path, upstream):
    root = make_checkout(tmp_path / "proj")
    before = hashes(root)
    stopped_at_the_conflict(root, upstream)
    again = start(root, upstream)
    assert again.returncode == 2
    assert "already in" in again.stderr and "--continue" in again.stderr and "--abort" in again.stderr
    # patches/ changed under a session: it refuses to go on (its end would overwrite the change)
    series_file = root / "patches" / "series"
    series_file.write_text(series_file.read_text() + "# a note\n")
    c = port_run(root, "--continue")
    assert c.returncode == 2 and "patches/" in c.stderr and "changed since the port session started" in c.stderr
    series_file.write_text(SERIES)
    # a resolution staged but not committed: --abort records it for the next run
    take_the_patch_side(tree_of(root) / CONFIGURER)
    git(tree_of(root), "add", CONFIGURER)
    a = port_run(root, "--abort", "--json")
    assert a.returncode == 0 and a.data["status"] == "aborted"
    assert hashes(root) == before
    assert not (root / "build" / "port").exists()
    assert list((root / "build" / "port-rr-cache").glob("*/postimage"))
    for verb in (["--continue"], ["--status"], ["--abort"], ["--skip", "--reason", "x"]):
        p = port_run(root, *verb)
        assert p.returncode == 2 and "no port session" in p.stderr, (verb, p.stderr)


def test_skip_drops_the_patch_and_records_the_reason_in_the_series(tmp_path, upstream):
    root = make_checkout(tmp_path / "proj")
    stopped_at_the_conflict(root, upstream)
    p = port_run(root, "--skip")
    assert p.returncode == 2 and "--reason" in p.stderr
    reason = "upstream turns DeepGEMM off on SM120 since 524ba10eda (#24692)"
    p = port_run(root, "--skip", "--reason", reason, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    skipped = next(x for x in p.data["patches"] if x["patch"] == CONFLICT)
    assert skipped["resolution"] == "skipped" and skipped["skipped"] and skipped["reason"] == reason
    assert p.data["written"]["dropped"] == [{"patch": CONFLICT, "reason": reason}]
    assert not (root / "patches" / CONFLICT).exists()
    assert (root / "patches" / "series").read_text() == SERIES.replace(
        "sm120-kernel-tables.patch\n", f"# dropped on v0.5.17: sm120-kernel-tables.patch: {reason}\n")
    assert run(root, "lint").returncode == 0
    assert lockmod.load(root / "upstream.lock").version == "0.5.17"


KILLER = r'''
import os, signal, sys
from sgl_overlay import cli
from sgl_overlay.commands import stack as command
from sgl_overlay.stack import port

point, root = sys.argv[1], sys.argv[2]


def kill_after(module, name, when=lambda *a: True):
    real = getattr(module, name)

    def step(*a, **k):
        out = real(*a, **k)
        if when(*a):
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    setattr(module, name, step)


# each step where the port package's modules look it up: the state saved (store), the end (end)
if point == "recorded":        # the resolution taken, the last patch not yet applied
    kill_after(port.store, "save", lambda places, s: s.phase is port.Phase.APPLYING and len(s.results) == 2)
elif point == "staged":        # the new patches/ copied and changed in build/port/stage, nothing recorded
    kill_after(port.end, "stage_patches")
elif point == "finishing":     # the phase 'finishing' recorded
    kill_after(port.store, "save", lambda places, s: s.phase is port.Phase.FINISHING)
elif point == "swapped":       # patches/ new, the lock old
    kill_after(port.end, "swap_patches")
elif point == "locked":        # both new, 'done' not yet recorded
    kill_after(port.end, "replace_lock")
elif point == "done":
    kill_after(port.store, "save", lambda places, s: s.phase is port.Phase.DONE)
sys.exit(cli.run(command.main, ["port", "--continue", "--root", root, "-q"]))
'''
POINTS = ("recorded", "staged", "finishing", "swapped", "locked", "done")


def test_killed_at_each_step_of_the_finish_leaves_each_file_whole_and_continue_completes(tmp_path, upstream):
    resolved = make_checkout(tmp_path / "resolved")
    old = normalized_hashes(resolved)
    stopped_at_the_conflict(resolved, upstream)
    take_the_patch_side(tree_of(resolved) / CONFIGURER)
    git(tree_of(resolved), "add", CONFIGURER)              # staged only: --continue runs git am --continue
    ref = tmp_path / "reference"
    shutil.copytree(resolved, ref, symlinks=True)
    p = port_run(ref, "--continue")
    assert p.returncode == 0, p.stdout + p.stderr
    new = normalized_hashes(ref)
    assert new != old

    def whole(h):
        patches = {k: v for k, v in h.items() if k != "upstream.lock"}
        return ({k: v for k, v in old.items() if k != "upstream.lock"} == patches or
                {k: v for k, v in new.items() if k != "upstream.lock"} == patches,
                h["upstream.lock"] in (old["upstream.lock"], new["upstream.lock"]))

    # one chain on one copy: each --continue killed at the next boundary resumes the run before it
    root = tmp_path / "killed"
    shutil.copytree(resolved, root, symlinks=True)
    seen = {}
    for point in POINTS:
        k = subprocess.run([sys.executable, "-c", KILLER, point, str(root)], capture_output=True, text=True,
                           timeout=600)
        assert k.returncode == -9, (point, k.returncode, k.stderr)
        h = normalized_hashes(root)
        assert whole(h) == (True, True), point                  # patches/ and the lock each entirely old or new
        seen[point] = ("new" if h == new else "old" if h == old else "mixed")
        phase = json.loads((root / "build" / "port" / "session.json").read_text())["phase"]
        seen[point] += f", {phase}"
    c = port_run(root, "--continue")
    assert c.returncode == 0, (c.stdout, c.stderr)
    assert normalized_hashes(root) == new
    assert port_run(root, "--status", "--json").data["phase"] == "done"
    # the boundaries really fell where they were meant to: old up to the swap, the lock after it
    assert seen == {"recorded": "old, applying", "staged": "old, applying", "finishing": "old, finishing",
                    "swapped": "mixed, finishing", "locked": "new, finishing", "done": "new, done"}


def test_a_kill_in_finishing_is_completed_by_status(tmp_path, upstream):
    """--status after a kill in the phase finishing rolls forward too."""
    root = make_checkout(tmp_path / "proj")
    stopped_at_the_conflict(root, upstream)
    take_the_patch_side(tree_of(root) / CONFIGURER)
    git(tree_of(root), "add", CONFIGURER)
    k = subprocess.run([sys.executable, "-c", KILLER, "swapped", str(root)], capture_output=True, text=True,
                       timeout=600)
    assert k.returncode == -9, k.stderr
    assert lockmod.load(root / "upstream.lock").version == "0.5.12.post1"   # patches/ new, the lock not yet
    a = port_run(root, "--abort")
    assert a.returncode == 2 and "finishing" in a.stderr and "--continue" in a.stderr
    s = port_run(root, "--status", "--json")
    assert s.returncode == 0 and s.data["phase"] == "done", s.stderr
    assert lockmod.load(root / "upstream.lock").version == "0.5.17"


def test_a_second_run_reuses_the_recorded_resolution(tmp_path, upstream):
    root = make_checkout(tmp_path / "proj")
    before = hashes(root)
    stopped_at_the_conflict(root, upstream)
    tree = tree_of(root)
    take_the_patch_side(tree / CONFIGURER)
    git(tree, "add", CONFIGURER)
    git(tree, "am", "--continue")                            # the person finishes git am themselves
    assert port_run(root, "--abort").returncode == 0
    assert hashes(root) == before
    r = start(root, upstream)
    assert r.returncode == 0, r.stdout + r.stderr                # no stop
    assert f"{CONFLICT}: conflict, resolution reused (rerere)" in r.stderr
    s = port_run(root, "--status", "--json").data
    got = next(p for p in s["patches"] if p["patch"] == CONFLICT)
    assert got["resolution"] == "rerere" and got["reused"] is True and got["status"] == "conflict"
    assert "+    if _is_cuda and sm_version // 10 == 12:\n" in (root / "patches" / CONFLICT).read_text()
    assert applies_to_pristine(root / "patches" / CONFLICT, "0.5.17")


# --------------------------------------------------------------------------
# bad input, before any work

def test_bad_input_is_refused_before_any_work(tmp_path):
    root = make_checkout(tmp_path / "proj")
    before = hashes(root)
    for args, words in [
        (["--continue"], "no port session"),
        (["--status"], "no port session"),
        (["--onto", "0.5.17", "--reason", "x"], "--reason goes with --skip"),
        (["--continue", "--repo", "x"], "--repo goes with --onto"),
        (["--onto", "0123456789ab", "--repo", str(tmp_path)], "ends by pinning a release"),
        (["--continue", "--abort"], "not allowed with"),
    ]:
        p = port_run(root, *args)
        assert p.returncode == 2 and words in p.stderr, (args, p.stderr)
    # a series with a lint finding: refused before anything is fetched or built
    text = (root / "patches" / NAMES[0]).read_text()
    (root / "patches" / NAMES[0]).write_text(text.replace("Upstream-Status: Pending\n", ""))
    p = port_run(root, "--onto", "0.5.17", "--repo", str(tmp_path / "nowhere"))
    assert p.returncode == 2 and "lint finding" in p.stderr and "Upstream-Status" in p.stderr, p.stderr
    (root / "patches" / NAMES[0]).write_text(text)
    assert hashes(root) == before and not (root / "build" / "port").exists()


# --------------------------------------------------------------------------
# the pure decisions

STOP = port.Stop(index=2, patch="x.patch", subject="Do x", status=Status.CONFLICT, head="a" * 40, am=True,
                 conflicted=("python/f.py",))


def facts(**kw):
    base = dict(am=True, unmerged=(), marked=(), staged=(), unstaged=(), untracked=(), commits=(),
                descends=True, merges=())
    return port.TreeFacts(**{**base, **kw})


@pytest.mark.parametrize("kw,want", [
    (dict(unmerged=("python/f.py",)), "unmerged"),
    (dict(marked=("python/f.py",)), "conflict markers"),
    (dict(descends=False), "no longer descends"),
    (dict(commits=(("b" * 40, "Do x"),), merges=("b" * 40,)), "merge commit"),
    (dict(commits=(("b" * 40, "Do x"),), unstaged=("python/g.py",)), "uncommitted changes"),
    (dict(staged=("python/f.py",), unstaged=("python/g.py",)), "not staged"),
    (dict(), "nothing was committed or staged"),
    (dict(am=False), "nothing was committed or staged"),
    (dict(staged=("python/f.py",)), port.Act.AM_CONTINUE),
    (dict(commits=(("b" * 40, "Do x"),)), port.Act.AM_QUIT),
    (dict(am=False, commits=(("b" * 40, "Do x"),)), port.Act.TAKE),
])
def test_continue_step(kw, want):
    got = port.continue_step(STOP, facts(**kw))
    if isinstance(want, port.Act):
        assert got is want
    else:
        assert isinstance(got, port.Refusal) and want in got.message and "x.patch" in got.message


def test_skip_step_keeps_commits_made_during_the_stop():
    assert port.skip_step(STOP, facts(staged=("python/f.py",))) is None
    refused = port.skip_step(STOP, facts(commits=(("b" * 40, "Do x"),)))
    assert isinstance(refused, port.Refusal) and "--continue keeps them" in refused.hint


def test_after_attempt():
    stopped = Attempt(Status.CONFLICT, stopped=True, conflicted=())
    assert port.after_attempt(Attempt(Status.APPLIED_3WAY)) is port.Step.RECORD
    assert port.after_attempt(Attempt(Status.EMPTIED)) is port.Step.RECORD
    assert port.after_attempt(stopped, facts(staged=("python/f.py",)), ("python/f.py",)) is port.Step.REUSE
    # a recorded resolution for one file, another still unmerged; or none recorded at all: the person decides
    assert port.after_attempt(stopped, facts(staged=("python/f.py",), unmerged=("python/g.py",)),
                              ("python/f.py",)) is port.Step.STOP
    assert port.after_attempt(stopped, facts(staged=("python/f.py",)), ()) is port.Step.STOP
    assert port.after_attempt(Attempt(Status.PROBABLY_UPSTREAM, stopped=True, conflicted=("python/f.py",)),
                              facts(unmerged=("python/f.py",))) is port.Step.STOP


def test_name_commits():
    commits = (("1" * 40, "A new helper"), ("2" * 40, "Do x"), ("3" * 40, "Another one"))
    got = port.name_commits("x.patch", "Do x", commits, {"x.patch", "y.patch"})
    assert [(c.name, c.commit[0]) for c in got] == [("a-new-helper.patch", "1"), ("x.patch", "2"),
                                                    ("another-one.patch", "3")]
    # reworded: the first commit keeps the name; a subject that names a patch already there is refused
    assert port.name_commits("x.patch", "Do x", (("1" * 40, "Do x better"),), set())[0].name == "x.patch"
    assert isinstance(port.name_commits("x.patch", "Do x", (("1" * 40, "Do x"), ("2" * 40, "Y")), {"y.patch"}),
                      port.Refusal)


def test_finish_steps_from_digests():
    s = port.Session(onto="0.5.17", repo="r", old_version="0.5.12.post1", lock_digest="L0", patches_digest="P0",
                     new_lock_digest="L1", new_base="b", merged={}, phase=port.Phase.FINISHING, head="h",
                     staged=port.Staged("P1", "L1", ()))
    both = (port.Put.SWAP_PATCHES, port.Put.REPLACE_LOCK)
    assert port.finish_steps(s, "P0", "L0", "P1", "L1") == both
    assert port.finish_steps(s, None, "L0", "P1", "L1") == both          # a fallback swap killed halfway
    assert port.finish_steps(s, "P1", "L0", "P0", "L1") == (port.Put.REPLACE_LOCK,)
    assert port.finish_steps(s, "P1", "L1", "P0", None) == ()
    for now in (("P9", "L0", "P1", "L1"), ("P0", "L9", "P1", "L1"), ("P0", "L0", "P9", "L1")):
        refused = port.finish_steps(s, *now)
        assert isinstance(refused, port.Refusal) and refused.integrity
        assert isinstance(refused.error(), IntegrityError) and not isinstance(refused.error(), UsageError)
