"""The repository's real stack (on the pin, SGLang v0.5.17) rebased onto real
later releases: the classifications follow from what those releases hold
(read here from the release trees themselves, the oracles):
- no release has the memory topic's module (model_executor/memory_budget.py),
  so no memory patch can be merged-upstream or applied silently a second time:
  each is a conflict (or, for a person to confirm, probably-upstream);
- from v0.5.20 ServerArgs no longer runs the all-reduce fusion passes itself
  (they moved to the resolution pipeline's model hook), so the
  communication patch, which adds its pass after them there, conflicts on
  server_args.py; nothing of sm120 is merged upstream.
(The rebases of the old pin's stack, v0.5.12.post1's, onto 0.5.13-0.5.16 were
this file's subject until the move; that stack is in git history, tests/conftest.py EARLIER_PINS.)
"""
import os
import subprocess
from pathlib import Path

import pytest

from tests.apply.support import ROOT
from sgl_overlay import lock as lockmod, release_trees, series, stack

LATER = ["0.5.20", "0.5.23"]
FUSION_SLOT = "run_post_process_pass(self, _enforce_disable_allreduce_fusion)"


@pytest.fixture(scope="module")
def repo_stack():
    return lockmod.load(ROOT / "upstream.lock"), series.load(ROOT)


@pytest.mark.parametrize("version", LATER)
def test_real_stack_classification(repo_stack, version):
    lock, st = repo_stack
    topics = {p.topic for p in st.patches}
    assert {"memory", "sm120"} <= topics, f"the stack lacks a topic: {sorted(topics)}"
    tree = release_trees.release_tree(version) / "sglang"
    assert not (tree / "srt" / "model_executor" / "memory_budget.py").exists()
    assert FUSION_SLOT not in (tree / "srt" / "server_args.py").read_text()
    report = stack.rebase(lock, st, stack.Onto(version=version))
    by_topic = {}
    for r in report["patches"]:
        by_topic.setdefault(r["topic"], []).append(r)
    for r in by_topic["memory"] + by_topic["debug"]:
        assert r["status"] in ("conflict", "probably-upstream"), (version, r["patch"], r["status"])
        if r["status"] == "conflict":
            assert r["failure"]["file"].startswith("python/sglang/")
    comm = [r for r in by_topic["sm120"] if "communication" in r["patch"]]
    assert len(comm) == 1 and comm[0]["status"] == "conflict", comm
    assert comm[0]["failure"]["file"] == "python/sglang/srt/server_args.py", comm[0]["failure"]
    assert not any(r["status"] == "merged-upstream" for r in by_topic["sm120"])
    assert report["resolved"] is False


def first_patch_applies(release_dir, topic):
    """The oracle, independent of stack.py: plain `git apply --check` of the
    topic's first patch on the release's own files (a/python/sglang/... is
    sglang/... there, hence -p2)."""
    first = next(p for p in series.load(ROOT).patches if p.topic == topic)
    # the release tree may sit inside a git checkout (the tests' cache under build/):
    # git apply there would ignore paths outside that repository's subfolder
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(Path(release_dir).parent))
    r = subprocess.run(["git", "apply", "--check", "-p2", str(first.path)], cwd=release_dir,
                       capture_output=True, text=True, env=env)
    return first.name, r.returncode == 0


@pytest.mark.parametrize("topic", ["memory", "sm120"])
def test_export_onto_0_5_23_refuses_what_git_apply_refuses(repo_stack, topic, tmp_path):
    """The topic's first pinned patch does not apply to 0.5.23 (its sizing and its
    start-up resolution changed after v0.5.17: the oracle is plain git apply):
    the export says so, names it, and writes nothing."""
    lock, _ = repo_stack
    name, applies = first_patch_applies(release_trees.release_tree("0.5.23"), topic)
    assert applies is False, f"{name} applies to 0.5.23 with plain git apply"
    out = stack.export(ROOT, lock, topic, stack.Onto(version="0.5.23"), tmp_path / "pr", run_tests=False,
                       use_port=False)        # the pinned patches, even where patches/ports/v0.5.23/ has the topic
    assert out["status"] == "does-not-apply"
    first = out["patches"][0]
    assert first["patch"] == name and first["status"] == "conflict", first
    assert first["failure"]["file"].startswith("python/sglang/") and first["failure"]["hunk"], first
    assert not (tmp_path / "pr").exists()          # nothing written for a series that does not apply


def test_rebase_onto_0_5_23_names_the_real_ports():
    """`stack.py rebase --onto 0.5.23` on the repository's stack: every
    pinned memory and sm120 patch is `ported`, by the port patch whose
    `Ports:` line names it (read here from the files with a plain regex) or
    as dropped, and no other topic's patch is."""
    import json
    import re
    import sys
    oracle = {}
    for f in sorted((ROOT / "patches" / "ports" / "v0.5.23").glob("*/*.patch")):
        m = re.search(r"^Ports: (.+)$", f.read_text(), re.M)
        for name in re.split(r"[,\s]+", m.group(1).strip()) if m else []:
            oracle[name] = f.relative_to(ROOT).as_posix()
    assert oracle, "no port in patches/ports/v0.5.23"
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "stack.py"), "rebase", "--onto", "0.5.23", "--json"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stderr                    # ported is not resolved: --write stays refused
    report = json.loads(p.stdout)
    for r in report["patches"]:
        if r["topic"] in ("memory", "sm120"):
            assert r["status"] == "ported", r
            assert r["ported"] == {"port": oracle[r["patch"]]} if r["patch"] in oracle else "dropped" in r["ported"], r
        else:
            assert r["status"] != "ported" and r["patch"] not in oracle, r
    assert report["ported"] == sum(r["topic"] in ("memory", "sm120") for r in report["patches"])
