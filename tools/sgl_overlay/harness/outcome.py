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

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from .protocol import DELIBERATE, Origin, SizingResult


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


def classify(child: SizingResult | Mapping) -> Classification:
    """Outcome of one child run (no remedy verification); ``child`` as read (``SizingResult``) or as
    written (its JSON)."""
    if not isinstance(child, SizingResult):
        child = SizingResult.parse(child)
    if child.completed:
        f = child.figures
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
    err = child.error
    if err is None:
        return Classification(Outcome.UNTESTABLE, "None from None at harness: None")
    etype, in_tree = err.deliberate_type, err.origin is Origin.TREE
    if err.kind.harness_cannot_drive or err.stub_involved:
        return Classification(Outcome.UNTESTABLE, f"{etype}: {err.message}")
    if in_tree and etype == "AssertionError":
        return Classification(Outcome.BROKEN, f"assertion in upstream code at {err.where}: {err.message}")
    if in_tree and etype in DELIBERATE and not err.raise_statement:
        return Classification(Outcome.UNTESTABLE,
                              f"{etype} inside upstream code at {err.where} but not at a raise statement "
                              f"(most likely a stand-in value): {err.message}")
    if in_tree and etype in DELIBERATE:
        return Classification(Outcome.REFUSED, f"{etype} at {err.where}: {err.message}", err.message)
    return Classification(Outcome.UNTESTABLE, f"{etype} from {err.origin} at {err.where or 'harness'}: {err.message}")
