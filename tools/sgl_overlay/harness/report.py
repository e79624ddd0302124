"""The harness's report of one scenario on one tree: typed values, and their
JSON form (``tools/regress.py --json``, docs/regress.md "The JSON report")
derived here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from ..errors import FAILED, OK, UNTESTABLE
from .case import Case
from .outcome import Outcome
from .protocol import SizingResult
from .readings import SizingReadings
from .remedy import Remedy


class Result(StrEnum):
    """The judgement of a report against its scenario's [expect], as git bisect run reads it."""

    PASS = "pass"
    FAIL = "fail"
    UNTESTABLE = "untestable"

    @property
    def passed(self) -> bool | None:
        """The JSON's ``passed``: true, false, or null for untestable."""
        return {Result.PASS: True, Result.FAIL: False, Result.UNTESTABLE: None}[self]

    @property
    def exit_code(self) -> int:
        """git bisect run's convention: 0 pass, 1 fail, 125 untestable."""
        return {Result.PASS: OK, Result.FAIL: FAILED, Result.UNTESTABLE: UNTESTABLE}[self]

    @property
    def label(self) -> str:
        return self.value.upper()


@dataclass(frozen=True)
class Rerun:
    """The sizing re-run with a remedy's value applied."""

    applied: dict
    outcome: Outcome
    reason: str
    figures: dict
    ledger: dict | None
    # the re-run's ledger case, where the check wanted one (an over-budget start's remedy must fit)
    case: Case | None = None
    case_wanted: bool = False


@dataclass(frozen=True)
class RemedyCheck:
    """One stated remedy and whether it works.  ``parsed`` is None where the
    message or warning states no flag value; ``looked_up``: the scenario's
    current value of the flag was read (``current``); ``rerun``: the sizing
    was re-run with the value applied.  ``works`` is None when not verified."""

    parsed: Remedy | None
    works: bool | None
    why: str
    looked_up: bool = False
    current: Any = None
    rerun: Rerun | None = None

    @classmethod
    def none_stated(cls, why: str) -> RemedyCheck:
        return cls(None, False, why)

    @classmethod
    def not_verified(cls, remedy: Remedy) -> RemedyCheck:
        return cls(remedy, None, "not verified")

    def to_json(self) -> dict:
        out: dict = {"parsed": self.parsed.to_dict() if self.parsed else None}
        if self.looked_up:
            out["current"] = self.current
        if self.rerun is not None:
            r = self.rerun
            out.update(applied=r.applied, rerun_outcome=r.outcome, rerun_reason=r.reason,
                       rerun_figures=r.figures, rerun_ledger=r.ledger)
        out.update(works=self.works, why=self.why)
        if self.rerun is not None and self.rerun.case_wanted:
            out["rerun_case"] = self.rerun.case
        return out


@dataclass(frozen=True)
class EndRun:
    """The sizing at another position of the readings' span than the pessimistic end, whose figures
    are the report's own (readings.py): the optimistic end, or either side of a step inside."""

    outcome: Outcome
    reason: str
    figures: dict
    readings: dict | None

    @classmethod
    def of(cls, child: SizingResult) -> EndRun:
        from .outcome import classify

        c = classify(child)
        return cls(c.outcome, c.reason, child.figures, child.readings)


# The figures a range is given in (the start-up log's own three)
RANGE_FIGURES = ("max_total_num_tokens", "max_running_requests", "max_mamba_cache_size")


def figure_range(runs: list[dict]) -> dict:
    """name -> [least, most] of each figure over the runs (figures dicts) that give it."""
    out = {}
    for k in RANGE_FIGURES:
        vals = [f[k] for f in runs if isinstance(f.get(k), (int, float))]
        if vals:
            out[k] = [min(vals), max(vals)]
    return out


@dataclass(frozen=True, kw_only=True)
class Findings:
    """What one scenario run on one tree found, before it is judged.

    ``remedies`` (with ``remedy``, the first or the reason there is none) are
    checked for a refusal and for an over-budget start (its warning's
    remedies, each of which must re-run as case fits); otherwise empty and
    None.  ``warning``: an over-budget start's ledger reason."""

    scenario: str
    tree: str
    version: str | None = None
    layout: str
    outcome: Outcome
    reason: str
    figures: dict = field(default_factory=dict)
    error: dict | None = None
    notes: list = field(default_factory=list)
    drafter_reading: dict | None = None
    readings: dict | None = None
    optimistic: EndRun | None = None
    inside: tuple[EndRun, ...] = ()
    timing: dict = field(default_factory=dict)
    reads: list = field(default_factory=list)
    ledger: dict | None = None
    log: list = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    case: Case | None = None
    remedy: RemedyCheck | None = None
    remedies: tuple[RemedyCheck, ...] = ()
    warning: str | None = None

    def range_json(self) -> dict | None:
        """Null where the readings are exact; else each end's outcome and figures, and every figure's
        [least, most] over the span's started runs (the ends and, where a Mamba slot is added inside,
        either side of each step: run.run_span)."""
        if self.optimistic is None:
            return None
        started = [r.figures for r in (self, self.optimistic, *self.inside) if r.outcome is Outcome.OK]

        def end(r):
            return {"outcome": r.outcome, "reason": r.reason,
                    "figures": {k: r.figures.get(k) for k in RANGE_FIGURES if r.figures.get(k) is not None}}

        return {"pessimistic": end(self), "optimistic": end(self.optimistic), "runs": 2 + len(self.inside),
                "figures": figure_range(started), "width": self.width()}

    def width(self) -> str:
        """What gives the readings' span its width, in words."""
        return SizingReadings.from_json(self.readings).width_words() if self.readings else "exact"

    @property
    def over_budget(self) -> bool:
        """Started over budget (docs/memory.md, case 2): ok, with the ledger's warning."""
        return self.outcome is Outcome.OK and self.case is Case.OVER_BUDGET


@dataclass(frozen=True, kw_only=True)
class Report(Findings):
    """The findings and their judgement (harness/judgement.py)."""

    result: Result
    judgement: str

    @classmethod
    def of(cls, found: Findings, result: Result, judgement: str) -> Report:
        return cls(**{f.name: getattr(found, f.name) for f in fields(Findings)}, result=result, judgement=judgement)

    @property
    def passed(self) -> bool | None:
        return self.result.passed

    def to_json(self) -> dict:
        """The report as tools/regress.py --json prints it (docs/regress.md, "The JSON report")."""
        out = {
            "scenario": self.scenario, "tree": self.tree, "version": self.version, "layout": self.layout,
            "outcome": self.outcome, "reason": self.reason, "figures": self.figures, "error": self.error,
            "notes": self.notes, "drafter_reading": self.drafter_reading, "readings": self.readings,
            "range": self.range_json(), "timing": self.timing,
            "reads": self.reads, "ledger": self.ledger, "log": self.log, "environment": self.environment,
        }
        # the remedies are checked for a refusal and an over-budget start; null (never absent) otherwise
        checked = self.outcome is Outcome.REFUSED or self.over_budget
        out["remedy"] = self.remedy.to_json() if checked and self.remedy else None
        out["remedies"] = [r.to_json() for r in self.remedies] if checked else None
        out["case"] = self.case
        out["warning"] = self.warning if self.over_budget else None
        out.update(passed=self.result.passed, judgement=self.judgement, exit_code=self.result.exit_code)
        return out
