"""Commit level, on a local git repository whose commits are consecutive
real release trees (tools/bench/release_history.py): the release
answers at commit granularity, the patch stack at every step (a patch
already upstream is dropped, a stack that does not apply is a skip),
--jobs 2, and a good ref off the first-parent line (merge base)."""
from tests.bisect.support import branchy_history, bisect, bound, results, without_drafter_weights


def run(tmp_path, trees, repo, *args):
    log = tmp_path / "log.jsonl"
    rc, data, err = bisect("--repo", str(repo), *args, "--log", str(log), "--tree-cache", str(trees), "--json")
    return rc, data, err, log


def label(point):
    return point["label"]


def test_zero_requests_fixed_at_the_0_5_13_commit(tmp_path, trees, repo):
    # the fix holds through v0.5.13.post1; from v0.5.14 the drafter's footprint counts in the
    # sizing's reading (sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855) and the scenario is refused again
    rc, data, err, log = run(tmp_path, trees, repo, "--bad", "v0.5.11", "--good", "v0.5.13.post1", "--fixed",
                             "--scenario", "zero-requests-dflash")
    assert rc == 0, err
    assert label(data["first_new"]) == "sglang 0.5.13" and label(data["last_old"]) == "sglang 0.5.12.post1"
    assert data["executions"] <= bound(5)


def test_negative_rest_fixed_at_the_0_5_14_commit(tmp_path, trees, repo):
    rc, data, err, log = run(tmp_path, trees, repo, "--bad", "v0.5.9", "--good", "v0.5.16", "--fixed",
                             "--scenario", "negative-rest-tp8")
    assert rc == 0, err
    assert label(data["first_new"]) == "sglang 0.5.14" and data["first_new"]["ref"] == ""
    assert data["executions"] <= bound(12)


def test_negative_rest_incident_not_in_range_at_commit_level(tmp_path, trees, repo):
    rc, data, err, log = run(tmp_path, trees, repo, "--good", "v0.5.9", "--bad", "v0.5.12.post1",
                             "--scenario", "negative-rest-tp8")
    assert rc == 4, err
    assert data["verdict"] == "not-in-range" and data["executions"] == 2


def test_with_stack_and_jobs_2_same_answer_skipping_where_the_stack_does_not_apply(tmp_path, trees, repo, stack_root):
    # the stack's skip (v0.5.14) and drops (v0.5.13, v0.5.16) need a range that passes at v0.5.16:
    # the scenario without the drafter's footprint, which from v0.5.14 is refused with it
    scenario = without_drafter_weights("zero-requests-dflash", tmp_path)
    rc, data, err, log = run(tmp_path, trees, repo, "--bad", "v0.5.11", "--good", "v0.5.16", "--fixed",
                             "--scenario", str(scenario), "--with-stack", "--root", str(stack_root),
                             "--jobs", "2")
    assert rc == 0, err
    assert label(data["first_new"]) == "sglang 0.5.13"
    by = {s["label"]: s for s in data["steps"]}
    # 0.5.14 changed set_kv_buffer's signature: the note patch does not apply -> skip, never bad
    assert by["sglang 0.5.14"]["result"] == "skip"
    rec = next(r for r in results(log) if r["raw"] == "skip")
    assert "kv-pool-loc-note.patch" in rec["summary"] and "does not apply" in rec["summary"]
    # the backport is upstream from 0.5.13 on: dropped there, and said so
    assert by["sglang 0.5.13"]["dropped"] == ["tbo-skip-preparer-when-off.patch"]
    assert by["sglang 0.5.16"]["dropped"] == ["tbo-skip-preparer-when-off.patch"]
    assert "dropped" not in by["sglang 0.5.11"]
    assert "dropped (already upstream here, applies in reverse): tbo-skip-preparer-when-off.patch" in err
    # two points at once: endpoints in one round, then rounds of two
    batches = {}
    for r in results(log):
        batches.setdefault(r["batch"], []).append(r["point"])
    assert all(len(v) <= 2 for v in batches.values()) and len(batches[1]) == 2


def test_with_stack_skip_at_the_answer_is_inconclusive(tmp_path, trees, repo, stack_root):
    """The fix is in 0.5.14, exactly where the stack does not apply: the
    honest answer is 'between 0.5.13.post1 and 0.5.15, 0.5.14 skipped'."""
    rc, data, err, log = run(tmp_path, trees, repo, "--bad", "v0.5.9", "--good", "v0.5.16", "--fixed",
                             "--scenario", "negative-rest-tp8", "--with-stack", "--root", str(stack_root))
    assert rc == 6, err
    assert data["verdict"] == "inconclusive"
    assert label(data["last_old"]) == "sglang 0.5.13.post1" and label(data["first_new"]) == "sglang 0.5.15"
    assert [s["label"] for s in data["skipped"]] == ["sglang 0.5.14"]
    assert "kv-pool-loc-note.patch" in data["skipped"][0]["why"]


def test_good_ref_off_the_first_parent_line_bisects_from_the_merge_base(tmp_path, trees):
    """v0.5.12.post1 sits on a release branch off 0.5.12, as upstream's tags do.  (v0.5.13, not
    v0.5.14, is the good end: from v0.5.14 the drafter's footprint counts and the scenario is
    refused again.)"""
    repo = branchy_history()
    rc, data, err, log = run(tmp_path, trees, repo, "--bad", "v0.5.12.post1", "--good", "v0.5.13", "--fixed",
                             "--scenario", "zero-requests-dflash")
    assert rc == 0, err
    assert label(data["first_new"]) == "sglang 0.5.13" and label(data["last_old"]) == "sglang 0.5.12"
    tested = [s["label"] for s in data["steps"]]
    assert "sglang 0.5.12.post1" in tested and "sglang 0.5.12" in tested     # the ref and the merge base
    assert "merge base" in err and "not an ancestor" in err


def test_all_parents_takes_the_merged_branch_first_parent_does_not(tmp_path, trees):
    import json
    from tests.bisect.scripts import version_test
    from tests.bisect.support import merge_history
    repo = merge_history()
    labels = {}
    for mode in ([], ["--all-parents"]):
        log = tmp_path / f"log{len(mode)}.jsonl"
        cmd = version_test(tmp_path / "t.py", tmp_path / "calls", first_bad="0.5.13")
        rc, data, err = bisect("--repo", str(repo), "--good", "v0.5.11", "--bad", "v0.5.14", *mode, "--log", str(log),
                               "--tree-cache", str(trees), "--json", "--", *cmd)
        assert rc == 0, err
        assert data["first_new"]["label"] == "Merge the 0.5.12 release branch"
        start = json.loads(log.read_text().splitlines()[0])
        labels[bool(mode)] = [p["label"] for p in start["range"]["points"]]
    assert labels[False] == ["sglang 0.5.11", "sglang 0.5.12", "Merge the 0.5.12 release branch", "sglang 0.5.14"]
    assert labels[True] == ["sglang 0.5.11", "sglang 0.5.12", "sglang 0.5.12.post1", "Merge the 0.5.12 release branch",
                            "sglang 0.5.14"]
