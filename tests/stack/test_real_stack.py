"""The repository's real stack rebased onto real later releases: the
classifications follow from what upstream did (SGLang's git history, commits named below):
- upstream reworked the hybrid-state sizing in 0.5.13 (dea85c30f4) and added
  its own error for a non-positive budget in 0.5.14 (0c065671c9): the memory
  topic must come out as conflict or probably-upstream from 0.5.13 on, never
  silently applied a second time;
- the torch symmetric-memory KeyError guard landed in 0.5.14 (69b02ea68a) on
  the lines our communication patch changes, while a 12.x table entry never
  did: applied at 0.5.13, not applicable from 0.5.14, never merged-upstream.
"""
import pytest

from tests.apply.support import ROOT
from sgl_overlay import lock as lockmod, series, stack

LATER = ["0.5.13", "0.5.14", "0.5.16", "0.5.23"]


def later(v):
    return tuple(int(x) for x in v.split("."))


@pytest.fixture(scope="module")
def repo_stack():
    return lockmod.load(ROOT / "upstream.lock"), series.load(ROOT)


@pytest.mark.parametrize("version", LATER)
def test_real_stack_classification(repo_stack, version):
    lock, st = repo_stack
    topics = {p.topic for p in st.patches}
    assert {"memory", "sm120"} <= topics, f"the stack lacks a topic: {sorted(topics)}"
    report = stack.rebase(lock, st, stack.Onto(version=version))
    by_topic = {}
    for r in report["patches"]:
        by_topic.setdefault(r["topic"], []).append(r)
    for r in by_topic["memory"]:
        assert r["status"] in ("conflict", "probably-upstream"), (version, r["patch"], r["status"])
        if r["status"] == "conflict":
            assert r["failure"]["file"].startswith("python/sglang/")
    comm = [r for r in by_topic["sm120"] if "communication" in r["patch"]]
    assert len(comm) == 1
    if later(version) < later("0.5.14"):
        assert comm[0]["status"] == "applied"
    else:
        assert comm[0]["status"] in ("conflict", "probably-upstream")
    assert not any(r["status"] == "merged-upstream" for r in by_topic["sm120"])
    assert report["resolved"] is False


@pytest.mark.parametrize("topic", ["memory", "sm120"])
def test_export_onto_0_5_23_applies_or_says_precisely_why_not(repo_stack, topic, tmp_path):
    lock, _ = repo_stack
    out = stack.export(ROOT, lock, topic, stack.Onto(version="0.5.23"), tmp_path / "pr", run_tests=False)
    assert out["status"] in ("exported", "does-not-apply")
    if out["status"] == "exported":
        assert any(f.endswith("pull-request.md") for f in out["files"])
    else:
        failing = [p for p in out["patches"] if p["status"] not in ("applied", "applied-3way")]
        assert failing
        assert not (tmp_path / "pr").exists()          # nothing written for a series that does not apply
        for p in failing:
            f = p.get("failure")
            assert f and f.get("file"), p
            assert f.get("hunk") or f.get("reason"), p
