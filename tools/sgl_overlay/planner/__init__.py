"""Memory planner: will this model start on this GPU with these flags?

Answered by the tree's own KV-cache sizing code, run on a CPU by the
regression harness (tools/sgl_overlay/harness); see docs/plan.md.

    from sgl_overlay.planner import deployment, plan
    dep = deployment(model="path/to/model", gpu="H200", argv=["--mem-fraction-static", "0.85"],
                     release="0.5.12.post1")
    report = plan(dep)
    report["verdict"].kind, report["ledger"]["kv_tokens"]      # Kind.STARTS, 11893
    cli.emit(report, ...)        # the JSON form: the verdict's sentence (Verdict.to_json)
"""

from __future__ import annotations


from ..errors import UsageError
from ..harness.readings import ReadingKind
from . import gpus
from .core import (REJECTED, STARTS, UNKNOWN, WONT, Deployment, Kind, Memory, Sizing, Tree, Verdict, memory_for,
                   parse_flags, plan, resolve_tree, size)
from .model import load as load_model
from .model import load_draft

__all__ = ["REJECTED", "STARTS", "UNKNOWN", "WONT", "Deployment", "Kind", "Memory", "Sizing", "Tree", "Verdict",
           "deployment", "plan", "size"]


def deployment(model, gpu: str | None = None, argv=(), draft=None, tree=None, release=None,
               free_gib=None, weights_gib=None, overhead_gib=gpus.DEFAULT_STARTUP_OVERHEAD_GIB,
               resolved_tree: Tree | None = None, checkout=None, readings: ReadingKind = ReadingKind.SIZING,
               rounding_gib: tuple[float, float] = (0.0, 0.0)) -> Deployment:
    """All inputs resolved and checked; UsageError (exit 2) names what is wrong.
    Without ``tree`` or ``release``: the patched tree of ``checkout`` (--root),
    else of the checkout at or above the current directory.  ``readings``: what ``free_gib`` are
    (--readings; the sizing's own by default), ``rounding_gib`` their half-widths (a logged value's)."""
    g = None
    if gpu is not None:
        g = gpus.lookup(gpu)
        if g is None:
            close = gpus.suggest(gpu)
            raise UsageError(f"GPU {gpu!r} is not in the planner's table"
                             + (f" (closest: {', '.join(close)})" if close else ""),
                             hint=f"known GPUs: {', '.join(gpus.names())}; or give the free memory with "
                                  f"--free-gib PRE[,POST]")
    t = resolved_tree or resolve_tree(tree, release, checkout)
    mi = load_model(model, t.root, t.label, weights_gib, need_weights=not (free_gib and len(free_gib) > 1))
    d = load_draft(draft) if draft else None
    fields, dropped = parse_flags(t, list(argv))
    if fields.get("speculative_algorithm") and d is None and str(fields["speculative_algorithm"]).upper() == "DFLASH":
        raise UsageError("--speculative-algorithm DFLASH needs the drafter's config",
                         hint="pass --draft DIR (the drafter's directory or config.json)")
    tp = int(fields.get("tp_size") or 1)
    mem = memory_for(mi, g, tp, free_gib, overhead_gib, ReadingKind(readings), rounding_gib)
    return Deployment(t, mi, d, g, mem, list(argv), fields, dropped)
