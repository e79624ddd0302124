"""Side by side with `git bisect run`, same repository, same command
(tools/bench_bisect.py): no more bisection runs than git needs, the two
endpoint checks on top (git trusts the endpoints you give it), and the
issue's ceiling of ceil(log2 N) + 2 executions."""
import math

from tools.bench_bisect import CASES, release_history, run_git, run_ours
from tests.bisect.support import HISTORY


def test_executions_against_git_bisect_run(tmp_path):
    scenario, fixed, old, new, expected = CASES["zero-requests-fixed"]
    versions = HISTORY[HISTORY.index(old):HISTORY.index(new) + 1]
    repo = release_history(HISTORY)            # the same commits; the range is old..new
    git = run_git(repo, scenario, fixed, old, new, tmp_path)
    ours = run_ours(repo, scenario, fixed, old, new, tmp_path)
    assert git["answer"] == ours["answer"] == expected
    assert ours["endpoint_runs"] == 2
    assert ours["executions"] - ours["endpoint_runs"] <= git["executions"]
    assert ours["executions"] <= math.ceil(math.log2(len(versions))) + 2


def test_the_incident_git_bisect_run_blames_a_release_bisect_py_does_not(tmp_path):
    scenario, fixed, old, new, expected = CASES["negative-rest-incident"]
    repo = release_history(HISTORY)
    git = run_git(repo, scenario, fixed, old, new, tmp_path)
    ours = run_ours(repo, scenario, fixed, old, new, tmp_path)
    assert ours["answer"] == "not-in-range" and ours["executions"] == 2
    # git trusts the 'good' endpoint it was given and names the first commit after it
    assert git["answer"] == "0.5.10"
