"""One sizing run: the deployment through the tree's real sizing code (one
fresh interpreter), judged."""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from dataclasses import dataclass, field

from ..harness.case import Case
from ..harness.outcome import Outcome, classify
from ..harness.protocol import ErrorRecord
from ..harness.report import EndRun, figure_range
from ..harness.run import run_span
from .inputs import Deployment, Memory
from .verdict import Verdict, judge, ledger, shortfall

# How many sizing runs may be in flight at once (each is one interpreter).
_SLOTS = threading.BoundedSemaphore(max(1, int(os.environ.get("SGLO_PLAN_JOBS", os.cpu_count() or 1))))


@dataclass
class Sizing:
    overrides: dict
    outcome: Outcome
    reason: str
    figures: dict
    error: ErrorRecord | None
    verdict: Verdict
    why: list[str]
    ledger: dict
    case: Case | None = None  # the tree's ledger figures.case, where the tree writes one
    shortfall: list[str] = field(default_factory=list)
    # the SGLang settings (SGLANG_*) the run was under: the caller's (harness/environment.py)
    environment: dict = field(default_factory=dict)
    # the drafter's weights in the sizing's reading (harness/draft_reading.py)
    drafter_reading: dict | None = None
    # the sizing's own readings (harness/readings.py); this run is at the pessimistic end of their span
    readings: dict | None = None
    # where the readings span a width and the whole span was run: each figure's [least, most] over it,
    # and the optimistic end's outcome (the verdict is the pessimistic end's)
    range: dict | None = None

    @property
    def rank(self) -> int:
        return self.verdict.rank(self.shortfall)

    def to_dict(self) -> dict:
        return {"overrides": self.overrides, "outcome": self.outcome, "reason": self.reason,
                "verdict": self.verdict, "case": self.case, "shortfall": self.shortfall,
                "why": self.why, "ledger": self.ledger,
                "error": {"type": self.error.type, "message": self.error.message, "where": self.error.where}
                if self.error else None}


def size(dep: Deployment, overrides: dict | None = None, memory: Memory | None = None, span: bool = False) -> Sizing:
    """One run of the tree's real sizing code (one fresh interpreter), at the pessimistic end of the
    readings' span (harness/readings.py: the smallest budget the readings allow), which the verdict is
    based on.  ``span``: where the readings span a width, run the rest of it too (harness.run.run_span)
    and give each figure's least and most (``range``)."""
    overrides = dict(overrides or {})
    with _SLOTS:
        child, *others = run_span(dep.tree.root, dep.request(overrides, memory), both=span)
    c = classify(child)
    figures = child.figures
    m = memory or dep.memory
    ctx = dep.context_len(overrides)
    explicit = (overrides.get("max_running_requests") or dep.fields.get("max_running_requests")) is not None
    tree_ledger = child.ledger or {}
    verdict, why = judge(c.outcome, c.reason, figures, ctx, child.error, explicit, tree_ledger)
    short = shortfall(figures, ctx, explicit) if c.outcome is Outcome.OK else []
    rng = None
    if others:
        ends = [EndRun.of(x) for x in others]
        started = [e.figures for e in [EndRun.of(child), *ends] if e.outcome is Outcome.OK]
        rng = {"optimistic": {"outcome": ends[0].outcome, "reason": ends[0].reason},
               "runs": 1 + len(ends), "figures": figure_range(started)}
    return Sizing(overrides, c.outcome, c.reason, figures, child.error, verdict, why,
                  ledger(figures, m, ctx, overrides.get("mem_fraction_static", dep.fields.get("mem_fraction_static"))
                         if "mem_fraction_static" in overrides or dep.fields.get("mem_fraction_static") is not None
                         else resolved(figures, "mem_fraction_static"),
                         child.readings),
                  Case.of(tree_ledger), short, child.environment,
                  child.drafter_reading, child.readings, rng)


def resolution_of(figures: dict, field_name: str) -> dict:
    """The release's own ServerArgs resolution's change of a field ({flag, given, resolved, rule}: the
    harness's record, harness/child/resolution.py), or {} where it did not change it."""
    return next((c for c in figures.get("resolution") or [] if c.get("flag") == field_name), {})


def resolved(figures: dict, field_name: str):
    """The value the release's own resolution gave a field it changed, or None."""
    return resolution_of(figures, field_name).get("resolved")


def sensitivity(dep: Deployment, base: Sizing, step_gib: float = 0.1) -> dict:
    """Tokens gained or lost per ``step_gib`` of error, each figure a re-run."""
    m = dep.memory
    shifted = {
        "free_memory_plus": m.shifted(step_gib, step_gib),
        "free_memory_minus": m.shifted(-step_gib, -step_gib),
        "weights_plus": m.shifted(0.0, -step_gib, step_gib),
        "weights_minus": m.shifted(0.0, step_gib, -step_gib),
    }
    with cf.ThreadPoolExecutor(4) as ex:
        runs = dict(zip(shifted, ex.map(lambda mm: size(dep, {}, mm), shifted.values())))
    t0 = base.figures.get("max_total_num_tokens")
    out = {"step_gib": step_gib, "base_tokens": t0}
    for k, s in runs.items():
        t = s.figures.get("max_total_num_tokens")
        out[k] = {"tokens": t, "delta_tokens": (t - t0) if isinstance(t, int) and isinstance(t0, int) else None,
                  "running_requests": s.figures.get("max_running_requests"), "verdict": s.verdict, "case": s.case}
    return out
