"""The drafter's weights in the sizing's free-memory reading.

Up to v0.5.13.post1 a speculative server sizes the target's KV cache inside the
target's ``ModelRunner``, before the drafter exists: the drafter's weights then
come out of the (1 - mem_fraction_static) reserve.  From sgl-project/sglang#23862
(2026-06-12, "Fix --mem-fraction-static not accounting for EAGLE draft model KV
cache"; first released in v0.5.14, whose refusal names the drafter since #28855) the
scheduler starts the drafter first and sizes afterwards
(``Scheduler.init_model_worker``: ``maybe_init_draft_worker()`` before
``init_memory_pools()``), so the sizing's reading is taken with the drafter's
weights on the GPU.

A scenario's post-load reading is the target's ("Load weight end").  On a tree
that starts the drafter first, the reading its sizing sees is that one less the
drafter's footprint (``[draft] weights_gib``: its weights and what its start
allocates after them before the sizing reads free memory; 3.4863 + 0.0977 GiB for
the z-lab-shaped drafter measured on the H200, tests/data/gpu_results/2026-12-02).  Where the scenario does not give
them, the run goes on with the target's reading and says that its figures
overstate the budget.

The order is read from the tree's own scheduler (``drafter_loads_before_sizing``);
``decide`` is the pure decision.
"""

from __future__ import annotations

import ast
from pathlib import Path

SCHEDULER = Path("sglang", "srt", "managers", "scheduler.py")
# what a report says the release does, and where that came from upstream
CITATION = "sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855"
STARTS_FIRST = f"this release starts the drafter before it sizes the KV cache ({CITATION})"
DRAFT_CALL, POOLS_CALL = "maybe_init_draft_worker", "init_memory_pools"


def drafter_loads_before_sizing(root: Path) -> bool:
    """Whether the tree's ``Scheduler.init_model_worker`` starts the drafter before
    it sizes the memory pools (False where either call or the method is absent)."""
    path = Path(root) / SCHEDULER
    if not path.is_file():
        return False
    text = path.read_text()
    if POOLS_CALL not in text:          # up to v0.5.13.post1 (and the pin): no parse on every run
        return False
    tree = ast.parse(text)
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler"):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "init_model_worker"):
            calls = [(c.lineno, c.col_offset, c.func.attr) for c in ast.walk(fn)
                     if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                     and c.func.attr in (DRAFT_CALL, POOLS_CALL)]
            order = [name for *_, name in sorted(calls)]
            return DRAFT_CALL in order and POOLS_CALL in order and order.index(DRAFT_CALL) < order.index(POOLS_CALL)
    return False


def overstated(report: dict) -> bool:
    """Whether a harness report's figures use the target's reading where the release
    counts the drafter's weights and the scenario gave none."""
    return bool((report.get("drafter_reading") or {}).get("overstates"))


def decide(drafter_first: bool, speculative: bool, weights_gib: float | None) -> dict:
    """How much lower than the target's post-load reading the sizing's reading is,
    and what the report says about it."""
    counted = drafter_first and speculative
    overstates = counted and weights_gib is None
    lowered = float(weights_gib) if counted and not overstates else 0.0
    note = None
    if overstates:
        note = (f"{STARTS_FIRST}, so its reading is taken with the drafter's weights loaded; the scenario gives none "
                "([draft] weights_gib), so these figures use the target's reading and overstate the budget "
                "by the drafter's weights")
    elif counted:
        note = (f"{STARTS_FIRST}: the sizing's reading is the post-load one less the drafter's {lowered} GiB ([draft] weights_gib)")
    return {"drafter_first": drafter_first, "weights_gib": weights_gib, "lowered_by_gib": lowered,
            "overstates": overstates, "note": note}
