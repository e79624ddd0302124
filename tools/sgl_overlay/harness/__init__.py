"""Regression harness: SGLang's real KV-cache sizing code on a CPU.

See docs/regress.md.  Public API:

    from sgl_overlay.harness import load_scenario, run_scenario, scenario_names
    report = run_scenario(tree_path, load_scenario("negative-rest-tp8"))
    report.outcome, report.result        # Outcome.REFUSED, Result.PASS
    report.to_json()                     # what tools/regress.py --json prints

The names are bound on first use (PEP 562): the child interpreter
(``python -m sgl_overlay.harness.child``, one per run) imports this package
first and needs none of the parent side (``run``, ``scenario`` and what they
import), which would cost every run its start-up time.
"""

from importlib import import_module

_WHERE = {
    "NoSource": "layout", "detect": "layout", "source_root": "layout", "version_of": "layout",
    "Classification": "outcome", "Outcome": "outcome", "classify": "outcome",
    "Relation": "remedy", "Remedy": "remedy", "parse_remedies": "remedy", "parse_remedy": "remedy",
    "Case": "case", "judge": "judgement",
    "Findings": "report", "RemedyCheck": "report", "Report": "report", "Rerun": "report", "Result": "report",
    "run_child": "run", "run_scenario": "run",
    "Scenario": "scenario", "ScenarioError": "scenario",
}
_RENAMED = {"load_scenario": ("scenario", "load"), "scenario_names": ("scenario", "names")}

__all__ = sorted([*_WHERE, *_RENAMED])


def __getattr__(name: str):
    if name in _WHERE:
        module, attr = _WHERE[name], name
    elif name in _RENAMED:
        module, attr = _RENAMED[name]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *__all__])
