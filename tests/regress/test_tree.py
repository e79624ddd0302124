"""Every scenario against the patched tree: the repository's stack built by
tools/apply.py (the ``patched_tree`` fixture of tests/conftest.py), or the tree
given with ``--tree PATH``.

All scenarios must pass there: the memory patches (docs/memory.md) turn the
pin's failures into refusals whose remedies the harness verifies by re-running
(or into starts).  An "untestable" report fails too: the harness must be able
to drive the tree it is meant to check.
"""

import pytest

from sgl_overlay.harness import load_scenario, run_scenario, scenario_names, source_root


@pytest.fixture(scope="module")
def tree(patched_tree):
    return source_root(patched_tree)


@pytest.mark.parametrize("scenario", scenario_names())
def test_scenario_on_tree(tree, scenario):
    report = run_scenario(tree, load_scenario(scenario))
    assert report.passed is True, report.judgement
    for remedy in report.remedies:
        assert remedy.works, remedy.why
