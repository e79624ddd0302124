"""The plan: one deployment (model, GPU, TP, flags, tree) through the harness.

Every number about KV tokens, Mamba slots and running requests comes from one
run of the tree's real sizing code by the regression harness
(``sgl_overlay.harness.run_child``, a fresh interpreter per run).  The
suggestions and the sensitivity figures are further runs of the same code
with one input changed; nothing here re-derives what SGLang computes.
"""

from __future__ import annotations

from .inputs import (GIB, Deployment, Memory, Tree, _label, _staleness, memory_for, parse_flags,
                     resolve_tree)
from .sizing import Sizing, resolution_of, sensitivity, size
from .suggestions import KNOBS, Suggestion, fraction_of, suggest, tree_remedies
from ..harness.outcome import Outcome
from .verdict import FULL, REJECTED, STARTED, STARTS, UNKNOWN, WONT, Kind, Verdict, judge, ledger, shortfall

__all__ = ["FULL", "REJECTED", "STARTED", "GIB", "KNOBS", "shortfall", "STARTS", "UNKNOWN", "WONT",
           "Deployment", "Kind", "Memory", "Sizing", "Suggestion", "Tree", "Verdict", "_label", "_staleness",
           "judge", "ledger", "memory_for", "parse_flags", "plan", "resolve_tree", "sensitivity", "size", "suggest",
           "tree_remedies"]


def plan(dep: Deployment, with_suggestions=True, with_sensitivity=True, knobs=KNOBS, progress=None) -> dict:
    """The whole plan: the verdict (``verdict_report``), then the slower parts (``complete``)."""
    report, base = verdict_report(dep)
    return complete(dep, report, base, with_suggestions, with_sensitivity, knobs, progress)


def verdict_report(dep: Deployment) -> tuple[dict, Sizing]:
    """The verdict and its ledger: one sizing (along the readings' span); (report, the sizing)."""
    base = size(dep, span=True)   # the whole span of the readings: the range; the verdict at its pessimistic end
    out = {
        "tree": {"root": str(dep.tree.root), "release": dep.tree.label, "layout": dep.tree.era,
                 "warning": dep.tree.warning},
        "model": {"config": str(dep.model.path), "architecture": dep.model.architecture,
                  "weights_bytes": dep.model.weights_bytes, "weights_source": dep.model.weights_source,
                  "weights_method": dep.model.weights_method},
        "draft": ({k: v for k, v in dep.draft.items() if k != "hf_config"} if dep.draft else None),
        "gpu": ({"name": dep.gpu.name, "total_mib": dep.gpu.total_mib, "source": dep.gpu.source}
                if dep.gpu else None),
        "tp": dep.tp,
        "flags": dep.argv,
        "server_fields": dep.fields,
        "flag_declarations_dropped": dep.dropped,
        # --mem-fraction-static as given, else the release's own choice for this card (docs/plan.md)
        "mem_fraction_static": _fraction(dep, base),
        # the caller's SGLANG_* settings, honoured by the sizing as the server would (harness/environment.py)
        "environment": base.environment,
        "assumptions": list(dep.memory.notes) + _fraction_assumption(dep, base) + _drafter_assumption(dep, base),
        "outcome": base.outcome,
        "verdict": base.verdict,
        "case": base.case,
        "shortfall": base.shortfall,
        "why": base.why,
        "ledger": base.ledger,
        # the sizing's own readings (harness/readings.py) and, where they span a width, each figure's
        # [least, most] over the span; the verdict and the ledger are the pessimistic end's
        "readings": base.readings,
        "range": base.range,
        "error": base.to_dict()["error"],
        # every flag the release's own ServerArgs resolution changed (harness/child/resolution.py)
        "resolution": base.figures.get("resolution") or [],
    }
    return out, base


def complete(dep: Deployment, out: dict, base: Sizing, with_suggestions=True, with_sensitivity=True,
             knobs=KNOBS, progress=None) -> dict:
    """The sensitivity, the tree's own remedies re-run, and the suggestions (the remedy search),
    added to a verdict report; each None where it was skipped (or, tree_remedies, where nothing was refused)."""
    out["sensitivity"] = out["tree_remedies"] = None     # null where skipped or not applicable, never absent
    if with_sensitivity and base.verdict.kind is not Kind.UNKNOWN:
        if progress:
            progress("sensitivity: four re-runs with the readings and the weights moved by 0.1 GiB")
        out["sensitivity"] = sensitivity(dep, base)
    if base.outcome is Outcome.REFUSED:
        out["tree_remedies"] = tree_remedies(dep, base)
    out["suggestions"] = out["search"] = None
    if with_suggestions:
        found, search = suggest(dep, base, knobs, progress)
        out["suggestions"] = [s.to_dict() for s in found]
        out["search"] = None if search is None else {
            "searched": list(search.searched), "max_flags": search.max_flags, "probes": search.probes,
            "tried": [list(t) for t in search.tried], "found": search.found,
            "nothing_starts": None if search.found else search.nothing_starts()}
    return out


def _fraction(dep: Deployment, base: Sizing) -> dict:
    """--mem-fraction-static and where it came from: given, or the release's own rule for this card."""
    given = dep.fields.get("mem_fraction_static")
    rule = resolution_of(base.figures, "mem_fraction_static").get("rule")
    return {"value": fraction_of(dep, base), "source": "given" if given is not None else "release",
            "rule": None if given is not None else rule}


def _fraction_assumption(dep: Deployment, base: Sizing) -> list[str]:
    if dep.fields.get("mem_fraction_static") is not None:
        return []
    f = _fraction(dep, base)
    card = (f"{dep.gpu.name}'s {dep.gpu.total_mib:,} MiB" if dep.gpu else
            "a device of unknown memory (no --gpu: give --gpu NAME for the card's own value)")
    if f["value"] is None:
        return ["--mem-fraction-static not given, and the release's resolution did not set it"]
    return [f"--mem-fraction-static not given: {f['value']}, the value SGLang {dep.tree.label} chooses for "
            f"{card} ({f['rule']}), as a server started with these flags would"]


def _drafter_assumption(dep, base) -> list[str]:
    """Where the drafter's weights stand in the sizing, on this release (harness/draft_reading.py)."""
    if not dep.draft:
        return []
    dr = base.drafter_reading or {}
    if dr.get("note"):
        return [dr["note"]]
    if not dr.get("drafter_first"):
        return ["the drafter's weights load after the target's KV sizing on this release: they come out of "
                "the (1 - mem_fraction_static) reserve, not out of the KV budget"]
    return []
