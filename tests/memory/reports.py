"""Harness reports for the memory tests, computed once per tree and scenario.

Reports are cached in a directory shared by the pytest-xdist workers
(``CACHE_DIR``, set by conftest.py), under the tree's label ("pristine",
"patched"), so that two workers do not run the same scenarios twice.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from sgl_overlay.harness import load_scenario, run_child, run_scenario, source_root

SCENARIOS = ["negative-rest-tp8", "zero-requests-dflash", "dflash-smoke", "dflash-smoke-raised", "dflash-default-48",
             "healthy-h200-8b", "dflash-smoke-tight"]

CACHE_DIR: Path | None = None
LABELS: dict = {}  # tree path -> label


def _cached(tree: Path, key: str, compute):
    if CACHE_DIR is None:
        return compute()
    from sgl_overlay.locking import hold

    path = CACHE_DIR / f"{LABELS.get(tree, str(tree).replace('/', '_'))}-{key}.json"
    with hold(Path(str(path) + ".lock"), f"the shared report {path.name}", wait=None):
        if path.exists():
            return json.loads(path.read_text())
        value = compute()
        path.write_text(json.dumps(value))
        return value


@lru_cache(maxsize=None)
def report(tree: Path, name: str) -> dict:
    """The full report's JSON form (tools/regress.py --json), remedies re-run, pools built on the meta device."""
    return _cached(tree, name, lambda: run_scenario(tree, load_scenario(name), measure_allocation=True).to_json())


def report_with(tree: Path, name: str, **flags) -> dict:
    """``report`` of the scenario with ``flags`` applied."""
    import dataclasses

    sc = load_scenario(name)
    sc = dataclasses.replace(sc, server=dict(sc.server, **flags))
    key = name + "".join(f"-{k}={v}" for k, v in sorted(flags.items()))
    return _cached(tree, key, lambda: run_scenario(tree, sc, measure_allocation=True).to_json())


@lru_cache(maxsize=None)
def child(tree: Path, name: str, overrides: tuple = ()) -> dict:
    """One sizing run with flags overridden (no remedy handling)."""
    key = "child-" + name + "".join(f"-{k}={v}" for k, v in overrides)
    return _cached(tree, key, lambda: run_child(source_root(tree), load_scenario(name).to_request(dict(overrides))))


def runs(rep: dict) -> list[tuple[dict, dict, dict]]:
    """(flags applied, ledger, figures) of the run itself and of every remedy re-run."""
    out = [({}, rep.get("ledger"), rep.get("figures", {}))]
    for r in (rep.get("remedies") or []):
        out.append((r.get("applied", {}), r.get("rerun_ledger"), r.get("rerun_figures", {})))
    return out
