"""Regression harness: SGLang's real KV-cache sizing code on a CPU.

See docs/regress.md.  Public API:

    from sgl_overlay.harness import load_scenario, run_scenario, scenario_names
    report = run_scenario(tree_path, load_scenario("negative-rest-tp8"))
    report["outcome"], report["passed"]
"""

from .layout import NoSource, detect, source_root, version_of
from .outcome import Remedy, classify, parse_remedies, parse_remedy
from .run import run_child, run_scenario
from .scenario import Scenario, ScenarioError
from .scenario import load as load_scenario
from .scenario import names as scenario_names

__all__ = [
    "NoSource", "Remedy", "Scenario", "ScenarioError", "classify", "detect", "load_scenario",
    "parse_remedies", "parse_remedy", "run_child", "run_scenario", "scenario_names", "source_root", "version_of",
]
