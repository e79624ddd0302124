"""Every scenario against one tree: --tree PATH (default build/sglang).

This is the check for a built overlay tree: the scenarios it must pass.  The
outcome of each is printed; a scenario fails here only when the harness
reports "fail" (not for "untestable", which is skipped with its reason).
"""

from pathlib import Path

import pytest

from tools.sglo.harness import NoSource, load_scenario, run_scenario, scenario_names, source_root


@pytest.fixture(scope="module")
def tree(request):
    path = request.config.getoption("--tree") or "build/sglang"
    try:
        return source_root(Path(path))
    except NoSource as e:
        pytest.skip(f"no tree to test: {e}")


@pytest.mark.parametrize("scenario", scenario_names())
def test_scenario_on_tree(tree, scenario):
    report = run_scenario(tree, load_scenario(scenario))
    if report["passed"] is None:
        pytest.skip(report["judgement"])
    assert report["passed"], report["judgement"]
