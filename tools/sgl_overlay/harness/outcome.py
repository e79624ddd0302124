"""Outcome classification: pure functions over plain data (the remedy a refusal
states is parsed by remedy.py).

Outcomes (``Outcome``, the contract bisect depends on; ``classify`` gives one
with its reason as a ``Classification``):
  ok          sizing completed with >= 1 running request and a positive KV pool
  broken      sizing completed into a state the server cannot run, or upstream
              code died in an assertion
  refused     upstream raised a deliberate error (ValueError/RuntimeError raised
              by a ``raise`` in the tree); its remedy, if any, is parsed
  untestable  the harness could not drive the tree (missing input, stand-in
              failure, unknown layout, scenario feature absent)

A third-party package missing from this environment is none of these: the
run stops with extras.MissingDependency (exit 2) naming it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..extras import third_party_missing



class Outcome(StrEnum):
    """What one sizing run of a tree came to (the module docstring says when)."""

    OK = "ok"
    BROKEN = "broken"
    REFUSED = "refused"
    UNTESTABLE = "untestable"


@dataclass(frozen=True)
class Classification:
    """One child run's outcome and why; ``message`` is a refusal's own text
    (the remedies are parsed from it), None for the other outcomes."""

    outcome: Outcome
    reason: str
    message: str | None = None


# Exception types upstream raises on purpose to refuse a configuration.
DELIBERATE = ("ValueError", "RuntimeError", "NotImplementedError")


def describe_exception(e: BaseException, root: Path) -> dict:
    """Plain-data description of an exception: where it came from and why."""
    from . import loader
    from .drivers import Untestable
    from .standins import MissingInput

    tb = traceback.extract_tb(e.__traceback__)
    root_s = str(Path(root).resolve())
    in_tree = [f for f in tb if f.filename.startswith(root_s)]
    last = tb[-1] if tb else None
    origin = "harness"
    if last is not None:
        if last.filename.startswith(root_s):
            origin = "tree"
        elif "<sglang stand-in" in last.filename or "/harness/loader.py" in last.filename:
            origin = "standin"
    raise_stmt = False
    if last is not None and origin == "tree":
        import linecache

        raise_stmt = linecache.getline(last.filename, last.lineno).strip().startswith("raise")
    where = None
    if in_tree:
        f = in_tree[-1]
        where = f"{Path(f.filename).relative_to(root_s)}:{f.lineno} ({f.name})"
    text = str(e)
    stub_involved = "stand-in" in text or "_StubMeta" in text or "_StubInstance" in text
    if not stub_involved:
        short = {n.rsplit(".", 1)[-1] for n in loader.StubRegistry.touched}
        stub_involved = any(f"'{n}'" in text for n in short)
    kind = "exception"
    if isinstance(e, MissingInput):
        kind = "missing-input"
    elif isinstance(e, Untestable):
        kind = "untestable"
    elif isinstance(e, ModuleNotFoundError) and third_party_missing(e.name):
        kind = "environment"  # a package missing here, not a property of the tree
    elif isinstance(e, ImportError):
        kind = "import"
    return {
        "type": type(e).__name__,
        # the class and its bases: a tree's own RuntimeError subclass is still deliberate
        "mro": [c.__name__ for c in type(e).__mro__],
        "message": text,
        "kind": kind,
        "package": third_party_missing(e.name) if kind == "environment" else None,
        "origin": origin,
        "where": where,
        "stub_involved": stub_involved,
        "raise_statement": raise_stmt,
        "traceback": "".join(traceback.format_exception(e))[-4000:],
        "standins_touched_sample": sorted(loader.StubRegistry.touched)[-10:] if stub_involved else [],
    }


def classify(child: dict) -> Classification:
    """Outcome of one child run (no remedy verification)."""
    if child.get("completed"):
        f = child.get("figures", {})
        tokens = f.get("max_total_num_tokens")
        reqs = f.get("max_running_requests")
        slots = f.get("max_mamba_cache_size")
        if tokens is None or reqs is None:
            return Classification(Outcome.UNTESTABLE, "sizing returned without a token count or request count")
        problems = []
        if tokens <= 0:
            problems.append(f"max_total_num_tokens={tokens}")
        if reqs <= 0:
            problems.append(f"max_running_requests={reqs}")
        if slots is not None and slots <= 0:
            problems.append(f"max_mamba_cache_size={slots}")
        if problems:
            return Classification(Outcome.BROKEN, "sizing completed with " + ", ".join(problems))
        return Classification(Outcome.OK, f"{tokens} KV tokens, {reqs} running requests"
                              + (f", {slots} Mamba slots" if slots is not None else ""))
    err = child.get("error") or {}
    etype, origin = err.get("type"), err.get("origin")
    if etype not in DELIBERATE and any(b in DELIBERATE for b in err.get("mro", ())):
        etype = next(b for b in err["mro"] if b in DELIBERATE)
    if err.get("kind") in ("missing-input", "untestable", "import") or err.get("stub_involved"):
        return Classification(Outcome.UNTESTABLE, f"{etype}: {err.get('message')}")
    if origin == "tree" and etype == "AssertionError":
        return Classification(Outcome.BROKEN,
                              f"assertion in upstream code at {err.get('where')}: {err.get('message')}")
    if origin == "tree" and etype in DELIBERATE and not err.get("raise_statement", True):
        return Classification(Outcome.UNTESTABLE,
                              f"{etype} inside upstream code at {err.get('where')} but not at a raise statement "
                              f"(most likely a stand-in value): {err.get('message')}")
    if origin == "tree" and etype in DELIBERATE:
        return Classification(Outcome.REFUSED, f"{etype} at {err.get('where')}: {err.get('message')}",
                              err.get("message"))
    return Classification(Outcome.UNTESTABLE,
                          f"{etype} from {origin} at {err.get('where') or 'harness'}: {err.get('message')}")
