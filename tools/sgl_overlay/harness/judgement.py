"""The judgement of a run's findings against its scenario's [expect] (pure):
pass, fail or untestable, and why in words."""

from __future__ import annotations

import re

from .outcome import Outcome
from .report import Findings, Result
from .scenario import RemedyExpect, Scenario


def judge(scenario: Scenario, found: Findings) -> tuple[Result, str]:
    """(result, why); untestable findings are Result.UNTESTABLE (exit 125)."""
    o = found.outcome
    exp = scenario.expect
    if o is Outcome.UNTESTABLE:
        return Result.UNTESTABLE, f"untestable: {found.reason}"
    if o not in exp.passing:
        return Result.FAIL, (f"{o} is not among the passing outcomes {[str(x) for x in exp.passing]}: "
                             f"{found.reason}")
    if exp.case is not None and found.ledger is not None and found.case is not exp.case:
        return Result.FAIL, f"{o}, but the ledger's case is {found.case}, not {exp.case}"
    if o is Outcome.OK and exp.figures:
        figs = found.figures or {}
        wrong = [f"{k} is {figs.get(k)}, not {v}" for k, v in exp.figures.items() if figs.get(k) != v]
        if wrong:
            return Result.FAIL, "ok, but " + "; ".join(wrong) + f" ({found.reason})"
    if found.over_budget and exp.remedy is RemedyExpect.WORKS:
        failing = [r for r in found.remedies if not r.works]
        if not found.remedies or failing:
            first = failing[0] if failing else found.remedy
            return Result.FAIL, ("started over budget; the warning's remedy does not reserve the pools: "
                                 + ((first.why if first else "") or ""))
        return Result.PASS, f"ok, over budget ({found.warning}); " + "; ".join(r.why for r in found.remedies)
    if o is Outcome.REFUSED:
        msg = (found.error or {}).get("message") or ""
        if exp.message and not re.search(exp.message, msg):
            return Result.FAIL, f"refused, but the message does not match /{exp.message}/: {msg}"
        if exp.remedy is not None:
            rem = found.remedy
            if rem is None or rem.parsed is None:
                if exp.remedy is RemedyExpect.WORKS_IF_STATED:
                    return Result.PASS, f"refused, stating no remedy value (none to verify): {found.reason}"
                return Result.FAIL, "refused without a remedy value in the message"
            if not rem.works:
                return Result.FAIL, f"refused; the remedy does not work: {rem.why}"
            checked = found.remedies or (rem,)
            failing = [r for r in checked if not r.works]
            if failing:
                return Result.FAIL, (f"refused; {len(failing)} of the stated remedies do not work: "
                                     f"{failing[0].why}")
            return Result.PASS, "refused with remedies that work: " + "; ".join(r.why for r in checked)
    return Result.PASS, f"{o}: {found.reason}"
