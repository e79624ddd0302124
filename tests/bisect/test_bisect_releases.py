"""Release level, on real published releases and the incident scenarios.
Expected answers are what upstream did (docs/results/regress.md, the research
notes): DFlash's zero-requests sizing was reworked in 0.5.13 (dea85c30f4);
the clear error for a non-positive budget came in 0.5.14 (0c065671c9), as did
the drafter starting before the sizing (sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855), which refuses
zero-requests-dflash again from 0.5.14 with its drafter's footprint counted;
and the negative-rest incident fails at both ends of 0.5.9..0.5.12.post1."""
from tests.bisect.support import bisect, bound, results


def run(tmp_path, *args):
    log = tmp_path / "log.jsonl"
    rc, data, err = bisect(*args, "--log", str(log), "--json")
    return rc, data, err, log


def test_zero_requests_fixed_in_0_5_13(tmp_path):
    rc, data, err, log = run(tmp_path, "--releases", "0.5.11..0.5.13.post1", "--scenario", "zero-requests-dflash",
                             "--fixed")
    assert rc == 0, err
    assert data["verdict"] == "first-fixed"
    assert data["first_new"]["id"] == "0.5.13" and data["last_old"]["id"] == "0.5.12.post1"
    # 5 releases: 0.5.11, 0.5.12, 0.5.12.post1, 0.5.13, 0.5.13.post1
    assert data["executions"] == len(results(log)) <= bound(5)
    # the offer to go on at commit level, for the range found (release tags are vVERSION upstream)
    assert data["commit_command"].endswith(
        "--good v0.5.13 --bad v0.5.12.post1 --fixed --scenario zero-requests-dflash")
    rc2, _, _ = bisect("--replay", str(log))
    assert rc2 == 0
    # one progress line per step, with outcome and seconds
    import re
    steps = [l for l in err.splitlines() if re.search(r"\] (step \d+ of ~\d+:|endpoint \((old|new)\)) ", l)]
    assert len(steps) == data["executions"]
    for line, s in zip(steps, data["steps"]):
        assert re.search(rf" {re.escape(s['point'])} \(sglang {re.escape(s['point'])}\): {s['result']} -> {s['term']}, "
                         r"\d+\.\ds \[", line), line


def test_negative_rest_fixed_in_0_5_14(tmp_path):
    rc, data, err, log = run(tmp_path, "--releases", "0.5.9..0.5.16", "--scenario", "negative-rest-tp8", "--fixed")
    assert rc == 0, err
    assert data["first_new"]["id"] == "0.5.14" and data["last_old"]["id"] == "0.5.13.post1"
    assert data["executions"] <= bound(12)
    fixed_at = [s for s in data["steps"] if s["point"] == "0.5.14"]
    assert fixed_at and fixed_at[0]["result"] == "pass"


def test_negative_rest_incident_is_not_in_range(tmp_path):
    """The original incident: the 'good' baseline fails too; the cause was the machine."""
    rc, data, err, log = run(tmp_path, "--releases", "0.5.9..0.5.12.post1", "--scenario", "negative-rest-tp8")
    assert rc == 4, err
    assert data["verdict"] == "not-in-range" and data["endpoint"]["id"] == "0.5.9"
    assert [s["result"] for s in data["steps"]] == ["fail", "fail"]        # both ends, nothing between
    assert "fails too" in data["words"][0] and "Not enough memory" in data["words"][1]
    assert "both ends" in data["words"][2]


def test_text_output_offers_the_commit_level_command(tmp_path):
    import subprocess, sys
    from tests.bisect.support import BISECT
    p = subprocess.run([sys.executable, str(BISECT), "--releases", "0.5.12.post1..0.5.13.post1", "--scenario",
                        "zero-requests-dflash", "--fixed", "--log", str(tmp_path / "l.jsonl")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "first fixed: 0.5.13" in p.stdout
    assert ("narrow it to commits: python tools/bisect.py --repo https://github.com/sgl-project/sglang "
            "--good v0.5.13 --bad v0.5.12.post1 --fixed --scenario zero-requests-dflash") in p.stdout


def test_untestable_old_end_is_inconclusive(tmp_path):
    """DFlash does not exist before 0.5.11: the harness says untestable, never 'bad'."""
    rc, data, err, _ = run(tmp_path, "--releases", "0.5.10.post1..0.5.13", "--scenario", "zero-requests-dflash",
                           "--fixed")
    assert rc == 6, err
    assert data["verdict"] == "inconclusive" and data["endpoint"]["id"] == "0.5.10.post1"
    assert "DFLASH" in " ".join(data["words"])


def test_with_stack_at_release_level(tmp_path, stack_root, trees):
    """Release artifacts laid out as python/sglang with the stack on top:
    the backport is dropped at 0.5.13, where upstream has it."""
    rc, data, err, log = run(tmp_path, "--releases", "0.5.12..0.5.13", "--scenario", "zero-requests-dflash", "--fixed",
                             "--with-stack", "--root", str(stack_root), "--tree-cache", str(trees))
    assert rc == 0, err
    assert data["first_new"]["id"] == "0.5.13"
    by = {s["point"]: s for s in data["steps"]}
    assert by["0.5.13"]["dropped"] == ["tbo-skip-preparer-when-off.patch"] and "dropped" not in by["0.5.12"]
