"""Suggestions: the smallest sets of flag changes that make the plan start, found by the
memory topic's remedy search (``sgl_overlay.memory_remedy``, the same search the patched
server's refusal runs), each probe a run of the tree's real sizing code; and the remedies
the tree's own refusal states, each re-run."""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass

from .. import memory_remedy as engine
from ..harness import remedy
from ..harness.outcome import Outcome
from .inputs import Deployment
from .sizing import Sizing, resolved, size
from .verdict import FULL

# The flags the search may change (--suggest KNOB,...): the names are the planner's since its first
# suggestions; "speculative-budget" is --speculative-dflash-block-size for DFLASH, else
# --speculative-num-draft-tokens; "radix-strategy" the Mamba radix-cache strategy.
KNOBS = ("mem-fraction-static", "max-running-requests", "context-length", "kv-cache-dtype",
         "max-mamba-cache-size", "speculative-budget", "radix-strategy")
MAX_FLAGS = 3  # the largest change set searched
WANT = 3  # remedies shown (the smallest sets; the search stops once it has these)


@dataclass
class Suggestion:
    """A set of changes that starts, and its own sizing run."""

    remedy: engine.Remedy
    sizing: Sizing

    @property
    def argv(self) -> list[str]:
        return self.remedy.argv

    def to_dict(self) -> dict:
        return {"argv": self.argv,
                "changes": [{"flag": c.knob.flag, "field": c.knob.field, "value": c.value, "was": c.knob.asked,
                             "gives_up": c.knob.gives_up.value} for c in self.remedy.changes],
                "verdict": self.sizing.verdict, "case": self.sizing.case, "shortfall": self.sizing.shortfall,
                "why": self.sizing.why, "ledger": self.sizing.ledger, "overrides": self.sizing.overrides}


def fraction_of(dep: Deployment, base: Sizing):
    """--mem-fraction-static as given, else the value the release's own ServerArgs chose (its
    resolution, recorded by the harness); None where neither is known."""
    given = dep.fields.get("mem_fraction_static")
    return given if given is not None else resolved(base.figures, "mem_fraction_static")


def knobs_for(dep: Deployment, base: Sizing, names=KNOBS) -> list[engine.Knob]:
    """The flags this plan can change, each with the values to try (the engine's constructors)."""
    f, out = base.figures, []
    mfs = fraction_of(dep, base)
    if "mem-fraction-static" in names and isinstance(mfs, (int, float)):
        out.append(engine.fraction_knob(mfs))
    asked = f.get("max_running_requests_flag")
    if "max-running-requests" in names and isinstance(asked, int) and asked > 1:
        out.append(engine.requests_knob(asked))
    ctx = dep.context_len()
    if "context-length" in names and ctx > 1024:
        out.append(engine.context_knob(ctx))
    if "kv-cache-dtype" in names:
        out.append(engine.kv_dtype_knob(str(dep.fields.get("kv_cache_dtype") or "auto")))
    slots = dep.fields.get("max_mamba_cache_size")
    if "max-mamba-cache-size" in names and f.get("mamba_cache_per_req_bytes") and isinstance(slots, int):
        out.append(engine.mamba_slots_knob(slots, asked if isinstance(asked, int) and asked > 0 else 1))
    spec, ntok = dep.fields.get("speculative_algorithm"), f.get("speculative_num_draft_tokens")
    if "speculative-budget" in names and spec and isinstance(ntok, int) and ntok > 2:
        fld = "speculative_dflash_block_size" if str(spec).upper() == "DFLASH" else "speculative_num_draft_tokens"
        out.append(engine.draft_tokens_knob("--" + fld.replace("_", "-"), fld, ntok))
    if "radix-strategy" in names and f.get("mamba_cache_per_req_bytes"):
        fld = next((k for k in ("mamba_radix_cache_strategy", "mamba_scheduler_strategy") if dep.fields.get(k)), None)
        if fld:
            flag = next((a.split("=")[0] for a in dep.argv
                         if a.split("=")[0] in ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy")),
                        "--" + fld.replace("_", "-"))
            out.append(engine.radix_strategy_knob(flag, fld, dep.fields[fld]))
    return [k for k in out if k.values]


def suggest(dep: Deployment, base: Sizing, knobs=KNOBS, progress=None) -> tuple[list[Suggestion], engine.Search | None]:
    """The smallest change sets that make the plan start with everything else asked, each a
    sizing run of its own: (suggestions, the search), or ([], None) where the plan starts as
    asked or cannot be judged."""
    if base.rank in (FULL, -1):
        return [], None

    def probe_all(batch):
        with cf.ThreadPoolExecutor(max(1, len(batch))) as ex:
            runs = list(ex.map(lambda fields: size(dep, fields), batch))
        return [(s.rank >= FULL, s) for s in runs]

    found = engine.search(knobs_for(dep, base, knobs), probe_all, MAX_FLAGS, WANT, progress)
    return [Suggestion(r, r.answer) for r in found.remedies], found


def tree_remedies(dep: Deployment, base: Sizing) -> list[dict]:
    """The remedies the tree's own refusal message states ("Raise --mem-fraction-static
    above 0.770", the memory patches' "remedy: --flag = value" and "remedy: --a 4 --b 0.93"),
    each re-run."""
    if base.outcome is not Outcome.REFUSED or not base.error:
        return []
    out = []
    for r in remedy.parse_remedies(base.error.message or ""):
        s = size(dep, r.changes)
        out.append({"argv": r.argv(), "changes": r.changes, "stated_as": r.source, "verdict": s.verdict,
                    "case": s.case, "shortfall": s.shortfall, "why": s.why, "ledger": s.ledger,
                    "works": s.rank > base.rank})
    return out
