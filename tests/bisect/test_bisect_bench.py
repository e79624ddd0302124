"""Side by side with `git bisect run`, same repository, same command
(tools/bench/bisect_vs_git.py): no more bisection runs than git needs, the two
endpoint checks on top (git trusts the endpoints you give it), and the
issue's ceiling of ceil(log2 N) + 2 executions."""
import math

from tests.bisect.support import HISTORY, ROOT, release_history
from tests.by_path import load

versus_git = load(ROOT / "tools" / "bench" / "versus_git.py", "versus_git")
CASES, run_git, run_ours, sweep = versus_git.CASES, versus_git.run_git, versus_git.run_ours, versus_git.sweep


def test_no_more_runs_than_git_bisect_run_wherever_the_change_is(tmp_path, trees):
    """Every possible first-bad commit of 0.5.12..0.5.15 (6 real release
    commits), a cheap test by the tree's version: the same answer as git,
    and exactly git's runs plus the two endpoint checks."""
    versions = HISTORY[HISTORY.index("0.5.12"):HISTORY.index("0.5.15") + 1]
    rows = sweep(release_history(HISTORY), versions, tmp_path, trees, root=ROOT)
    assert [r["first_bad"] for r in rows] == versions[1:]
    for r in rows:
        assert r["git_answer"] == r["ours_answer"] == r["first_bad"]
        assert r["ours"] - 2 <= r["git"], r
        assert r["ours"] <= math.ceil(math.log2(len(versions))) + 2


def test_the_incident_git_bisect_run_blames_a_release_bisect_py_does_not(tmp_path, trees):
    scenario, fixed, old, new, expected = CASES["negative-rest-incident"]
    repo = release_history(HISTORY)
    git = run_git(repo, scenario, fixed, old, new, tmp_path, root=ROOT)
    ours = run_ours(repo, scenario, fixed, old, new, tmp_path, trees=trees, root=ROOT)
    assert ours["answer"] == "not-in-range" and ours["executions"] == 2
    # git trusts the 'good' endpoint it was given and names the first commit after it
    assert git["answer"] == "0.5.10"
