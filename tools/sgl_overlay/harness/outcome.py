"""Outcome classification and remedy parsing: pure functions over plain data.

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

import re
import traceback
from dataclasses import asdict, dataclass
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


@dataclass
class Remedy:
    flag: str  # command-line flag, e.g. "--mem-fraction-static"
    key: str  # scenario [server] key, e.g. "mem_fraction_static"
    value: float | int | str
    relation: str  # "above" | "below" | "set"
    source: str  # the text it was parsed from

    def to_dict(self):
        return asdict(self)


def _num(s: str):
    return int(s) if re.fullmatch(r"-?\d+", s) else float(s)


# The machine-readable remedy line the memory patches emit, one per line
# (docs/memory.md, "Remedies"):  remedy: --<flag> = <value>
# <flag> is a command-line flag of SGLang, <value> an integer, a decimal or a
# word; each line alone is a flag value that lets the sizing complete, the
# first is preferred.  The patched tree writes it with
# sglang.srt.model_executor.memory_budget.remedy_line; tests/memory checks the two agree.
MACHINE_REMEDY = re.compile(r"^remedy:[ \t]*(?P<flag>--[a-z0-9-]+)[ \t]*=[ \t]*(?P<value>[-\w.]+)[ \t]*$", re.M)

# Parsers, tried in order; each returns a Remedy or None.  Add new message
# shapes here (upstream wording, or our own patches' machine-readable line).
REMEDY_PATTERNS: list[tuple[re.Pattern, str]] = [
    (MACHINE_REMEDY, "set"),
    # Upstream v0.5.14+: "Raise --mem-fraction-static above 0.770"
    (re.compile(r"[Rr]aise\s+(?P<flag>--[a-z0-9-]+)\s+(?:above|to at least)\s+(?P<value>-?\d+(?:\.\d+)?)"), "above"),
    (re.compile(r"[Ll]ower\s+(?P<flag>--[a-z0-9-]+)\s+(?:below|to at most)\s+(?P<value>-?\d+(?:\.\d+)?)"), "below"),
    # Generic "set --flag to N" / "use --flag N"
    (re.compile(r"(?:[Ss]et|[Uu]se)\s+(?P<flag>--[a-z0-9-]+)(?:\s+to|\s*=)?\s+(?P<value>-?\d+(?:\.\d+)?)\b"), "set"),
]


def _remedy(m: re.Match, relation: str) -> Remedy:
    flag = m.group("flag")
    raw = m.group("value")
    try:
        value = _num(raw)
    except ValueError:
        value = raw
    return Remedy(flag, flag.lstrip("-").replace("-", "_"), value, relation, m.group(0))


def parse_remedies(message: str) -> list[Remedy]:
    """Every machine-readable remedy line, in order; else the first other shape that matches."""
    lines = [_remedy(m, "set") for m in MACHINE_REMEDY.finditer(message or "")]
    if lines:
        return lines
    for pattern, relation in REMEDY_PATTERNS[1:]:
        m = pattern.search(message or "")
        if m:
            return [_remedy(m, relation)]
    return []


def parse_remedy(message: str) -> Remedy | None:
    """The preferred remedy (the first that parse_remedies finds), or None."""
    found = parse_remedies(message)
    return found[0] if found else None


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
