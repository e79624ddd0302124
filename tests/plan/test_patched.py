"""The patched tree (this repository's stack, built by tools/apply.py into a temporary
directory by the shared ``patched_tree`` fixture, or the tree given with --tree)."""

from sgl_overlay.planner import core, deployment, plan

from .helpers import DFLASH, LOGGED_FREE, QWEN36, ZERO_FLAGS, recheck_all


def test_zero_request_flags_on_the_patched_tree(patched_tree):
    """Whatever the patch stack decides, the plan says it in words, never a silent zero
    the harness cannot classify, and every remedy and suggestion it prints is re-checked."""
    args = dict(model=QWEN36, draft=DFLASH, argv=ZERO_FLAGS, tree=str(patched_tree), free_gib=LOGGED_FREE)
    dep = deployment(**args)
    report = plan(dep, with_sensitivity=False, knobs=("max-running-requests",))
    assert report["verdict"] in (core.WONT, core.DEGRADED, core.STARTS)
    assert report["why"]
    # the memory topic's promise for this configuration: no silent zero requests
    assert report["outcome"] != "broken", report["why"]
    if report["outcome"] == "refused":
        # the tree's own stated remedies were each re-run
        assert all("verdict" in t for t in report.get("tree_remedies", []))
    recheck_all(args, report)
