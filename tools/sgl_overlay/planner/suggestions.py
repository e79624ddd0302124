"""Suggestions: the smallest change of each knob that fixes the plan, and
the remedies the tree's own refusal states, each verified by a sizing run."""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass

from .. import monotone
from ..harness import remedy
from ..harness.outcome import Outcome
from .inputs import Deployment
from .sizing import Sizing, size
from .verdict import FULL, STARTED, Kind, Verdict


@dataclass
class Suggestion:
    flag: str
    value: object
    field: str
    sizing: Sizing
    tried: int
    note: str = ""

    def to_dict(self) -> dict:
        return {"flag": self.flag, "value": self.value, "field": self.field, "argv": [self.flag, str(self.value)],
                "verdict": self.sizing.verdict, "case": self.sizing.case, "shortfall": self.sizing.shortfall,
                "why": self.sizing.why, "ledger": self.sizing.ledger,
                "runs": self.tried, "note": self.note, "overrides": self.sizing.overrides}


def _fixes(s: Sizing, target: int) -> bool:
    return s.rank >= target


def _bisect(dep, field_name, lo, hi, target, make, better_high: bool, hint: int | None = None):
    """The smallest change of one flag that fixes the plan, on a grid of indices.

    ``better_high``: raising the value helps, so find the lowest passing index in
    (lo, hi]; otherwise lowering helps, so find the highest passing index in [lo, hi).
    ``make(i)`` maps an index to the flag's value.  Every probe is a sizing run;
    the far end is probed first, so a flag that cannot help costs one run.
    ``hint``: an index to probe first with its neighbour toward the current value
    (a guess from the base run's figures; only runs decide).
    Returns ((value, sizing) or None, runs)."""
    def probe(i):
        s = size(dep, {field_name: make(i)})
        return s, _fixes(s, target)

    b = monotone.boundary(probe, lo, hi, hint) if better_high else monotone.boundary(probe, hi, lo, hint)
    return ((make(b.passing[0]), b.passing[1]) if b.passing else None), b.probes


KNOBS = ("mem-fraction-static", "max-running-requests", "context-length", "kv-cache-dtype",
         "max-mamba-cache-size", "speculative-budget")


def suggest(dep: Deployment, base: Sizing, knobs=KNOBS) -> tuple[list[Suggestion], list[dict]]:
    """The smallest change of each knob that fixes the plan, each verified by a run.

    The target is "starts"; for a plan that will not start, a knob that cannot get
    there is searched again for the smallest change that makes it start at all
    (short of everything asked; the verdict column says so)."""
    if base.rank in (FULL, -1):
        return [], []
    f = base.figures
    jobs = {}
    mfs = dep.fields.get("mem_fraction_static")
    if "mem-fraction-static" in knobs and isinstance(mfs, (int, float)):
        # a 0.005 grid above the current value, never above 0.95: the headroom has
        # to hold activations and CUDA graphs, which the sizing does not model
        lo = int(mfs * 200)
        hi = 190
        if hi > lo:
            jobs["mem-fraction-static"] = ("mem_fraction_static", lambda target: _bisect(
                dep, "mem_fraction_static", lo, hi, target, lambda i: round(i / 200, 3), True),
                "less headroom for activations and CUDA graphs")
    asked = f.get("max_running_requests_flag")
    if "max-running-requests" in knobs and isinstance(asked, int) and asked > 1:
        jobs["max-running-requests"] = ("max_running_requests", lambda target: _bisect(
            dep, "max_running_requests", 1, asked, target, lambda i: i, False), "")
    ctx = dep.context_len()
    if "context-length" in knobs and ctx > 1024:
        grid = ctx // 1024 if ctx % 1024 == 0 else ctx // 1024 + 1
        tokens = f.get("max_total_num_tokens")
        hint = tokens // 1024 if isinstance(tokens, int) and tokens > 0 else None
        jobs["context-length"] = ("context_length", lambda target: _bisect(
            dep, "context_length", 1, grid, target, lambda i: min(i * 1024, ctx - 1), False, hint), "")
    kv = str(dep.fields.get("kv_cache_dtype") or "auto")
    if "kv-cache-dtype" in knobs and not kv.startswith("fp8"):
        def kv_job(target):
            s = size(dep, {"kv_cache_dtype": "fp8_e4m3"})
            return ((("fp8_e4m3", s) if _fixes(s, target) else None), 1)
        jobs["kv-cache-dtype"] = ("kv_cache_dtype", kv_job, "halves the KV cell; quality depends on the model")
    if "max-mamba-cache-size" in knobs and f.get("mamba_cache_per_req_bytes"):
        reqs = asked if isinstance(asked, int) and asked > 0 else 1
        cur = dep.fields.get("max_mamba_cache_size")

        def mamba_job(target):
            cands = sorted({reqs * k for k in (1, 2, 4, 6)} - {cur},
                           key=lambda v: (abs(v - cur) if isinstance(cur, int) else v))
            runs = 0
            for v in cands:
                s = size(dep, {"max_mamba_cache_size": v})
                runs += 1
                if _fixes(s, target):
                    return (v, s), runs
            return None, runs
        jobs["max-mamba-cache-size"] = ("max_mamba_cache_size", mamba_job,
                                        "candidates: multiples of the running requests asked")
    spec = dep.fields.get("speculative_algorithm")
    ntok = f.get("speculative_num_draft_tokens")
    if "speculative-budget" in knobs and spec and isinstance(ntok, int) and ntok > 1:
        fld = "speculative_dflash_block_size" if str(spec).upper() == "DFLASH" else "speculative_num_draft_tokens"
        note = ("a DFlash drafter is trained for its block size; a smaller verify window may cost acceptance"
                if fld == "speculative_dflash_block_size" else "fewer draft tokens verified per step")
        jobs["speculative-budget"] = (fld, lambda target: _bisect(dep, fld, 1, ntok, target, lambda i: i, False),
                                      note)
    found: list[Suggestion] = []
    tried: list[dict] = []
    with cf.ThreadPoolExecutor(max(1, len(jobs))) as ex:
        futs = {k: ex.submit(_staged, fn, base.verdict) for k, (fld, fn, note) in jobs.items()}
        for k, fut in futs.items():
            fld, _, note = jobs[k]
            res, runs = fut.result()
            if res is None:
                tried.append({"flag": f"--{k}" if k != "speculative-budget" else f"--{fld.replace('_', '-')}",
                              "runs": runs, "found": False,
                              "why": "no value in the searched range makes it start"})
                continue
            value, s = res
            flag = "--" + fld.replace("_", "-")
            found.append(Suggestion(flag, value, fld, s, runs, note))
            tried.append({"flag": flag, "runs": runs, "found": True})
    return found, tried


def tree_remedies(dep: Deployment, base: Sizing) -> list[dict]:
    """The remedies the tree's own refusal message states ("Raise --mem-fraction-static
    above 0.770", the memory patches' "remedy: --flag = value"), each re-run."""
    if base.outcome is not Outcome.REFUSED or not base.error:
        return []
    remedies = remedy.parse_remedies(base.error.get("message", ""))
    out = []
    for r in remedies:
        s = size(dep, {r.key: r.value})
        out.append({"flag": r.flag, "value": r.value, "field": r.key, "argv": [r.flag, str(r.value)],
                    "stated_as": r.source, "verdict": s.verdict, "case": s.case, "shortfall": s.shortfall,
                    "why": s.why, "ledger": s.ledger, "works": s.rank > base.rank})
    return out


def _staged(fn, base_verdict: Verdict):
    """Search for "starts" with everything asked; for a plan that will not start,
    then for any start."""
    res, runs = fn(FULL)
    if res is None and base_verdict.kind is Kind.WONT:
        res, more = fn(STARTED)
        runs += more
    return res, runs
