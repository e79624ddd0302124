"""The remedy a refusal states, parsed: one parser for every message shape.

A refusal names the flag value that would let the sizing complete in one of
these shapes (docs/memory.md, "Remedies"; docs/regress.md, step 8):

  remedy: --max-running-requests = 1     the memory patches' machine-readable line,
                                          one per line, the first preferred
  remedy: --max-running-requests 3 --mem-fraction-static 0.925
                                          the same, a set of changes that starts
                                          together (where no single flag value does)
  Raise --mem-fraction-static above 0.770 upstream's wording (v0.5.14 on); also
                                          "to at least N"
  Lower --flag below N                    also "to at most N"
  Set --flag to N / use --flag N          any other message

Its callers: the harness (harness/run.py verifies each remedy by a re-run), the
planner (planner/suggestions.py) and tools/gpu/e2e_log.py, the GPU check's
start-up log parser, which re-runs a patched refusal with its first machine
line.  The GPU machine runs that script from a copy of the tree with plain
python3 and loads this file by its path: standard library only, no relative
imports.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass


class Relation(enum.StrEnum):
    """How the stated value relates to the values that work."""

    SET = "set"  # this value works (the machine line, "set/use --flag N")
    ABOVE = "above"  # any value above it ("Raise --flag above N")
    BELOW = "below"  # any value below it ("Lower --flag below N")


@dataclass(frozen=True)
class Remedy:
    flag: str  # command-line flag, e.g. "--mem-fraction-static"
    key: str  # scenario [server] key, e.g. "mem_fraction_static"
    value: float | int | str  # the value, a number where it reads as one
    relation: Relation
    source: str  # the text it was parsed from
    text: str  # the value as written ("0.7200" stays "0.7200"): what a command line is given
    # the other changes of a remedy of several flags, each applied with this one
    also: tuple["Remedy", ...] = ()

    @property
    def parts(self) -> tuple["Remedy", ...]:
        """Every change of the remedy: this one, then ``also``."""
        return (self, *self.also)

    @property
    def changes(self) -> dict:
        """{scenario [server] key: value} of every change: what a re-run applies."""
        return {r.key: r.value for r in self.parts}

    @property
    def flags(self) -> str:
        """The changes as a command line takes them ("--a 4 --b 0.93")."""
        return " ".join(self.argv())

    def to_dict(self) -> dict:
        """The report's form (the harness's `remedies[].parsed`, docs/regress.md); a remedy of
        several flags lists the others under ``also``."""
        out = {"flag": self.flag, "key": self.key, "value": self.value, "relation": str(self.relation),
               "source": self.source}
        if self.also:
            out["also"] = [{"flag": r.flag, "key": r.key, "value": r.value} for r in self.also]
        return out

    def argv(self) -> list[str]:
        """The flags and their values as a command line takes them."""
        return [word for r in self.parts for word in (r.flag, r.text)]


_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+(?:\.\d*)?[eE][-+]?\d+)")


def _num(s: str) -> float | int | str:
    if _INT.fullmatch(s):
        return int(s)
    if _FLOAT.fullmatch(s):
        return float(s)
    return s


# The machine-readable line: `remedy: --<flag> = <value>` alone on its line (blanks around
# it allowed), <flag> a command-line flag of SGLang, <value> anything without a blank (an
# integer, a decimal, a word).  The patched tree writes it with
# sglang.srt.model_executor.memory_budget.remedy_line; tests/memory checks the two agree.
MACHINE_REMEDY = re.compile(
    r"^[ \t]*remedy:[ \t]*(?P<flag>--[a-z0-9-]+)[ \t]*=[ \t]*(?P<value>\S+)[ \t\r]*$", re.M)
# A set of changes that starts together: `remedy: --<flag> <value> [--<flag> <value> ...]`, the flags
# as a command line takes them (memory_budget.combined_remedy_line).
COMBINED_REMEDY = re.compile(
    r"^[ \t]*remedy:(?P<pairs>(?:[ \t]+--[a-z0-9-]+[ \t]+[^\s=-]\S*)+)[ \t\r]*$", re.M)
_PAIR = re.compile(r"(?P<flag>--[a-z0-9-]+)[ \t]+(?P<value>\S+)")

_NUMBER = r"(?P<value>-?\d+(?:\.\d+)?)"
# The other shapes, tried in order after the machine lines; the first that matches is the remedy.
PROSE_REMEDIES: tuple[tuple[re.Pattern, Relation], ...] = (
    # Upstream v0.5.14+: "Raise --mem-fraction-static above 0.770"
    (re.compile(r"[Rr]aise\s+(?P<flag>--[a-z0-9-]+)\s+(?:above|to at least)\s+" + _NUMBER), Relation.ABOVE),
    (re.compile(r"[Ll]ower\s+(?P<flag>--[a-z0-9-]+)\s+(?:below|to at most)\s+" + _NUMBER), Relation.BELOW),
    # Generic "set --flag to N" / "use --flag N"
    (re.compile(r"(?:[Ss]et|[Uu]se)\s+(?P<flag>--[a-z0-9-]+)(?:\s+to|\s*=)?\s+" + _NUMBER + r"\b"), Relation.SET),
)


def _remedy(m: re.Match, relation: Relation) -> Remedy:
    flag, text = m.group("flag"), m.group("value")
    return Remedy(flag, flag.lstrip("-").replace("-", "_"), _num(text), relation, m.group(0).strip(), text)


def _combined(m: re.Match) -> Remedy:
    first, *rest = (_remedy(p, Relation.SET) for p in _PAIR.finditer(m.group("pairs")))
    return dataclasses.replace(first, source=m.group(0).strip(), also=tuple(rest))


def machine_remedies(text: str) -> list[Remedy]:
    """Every machine-readable `remedy:` line of ``text`` (either shape), in order (repeats kept)."""
    found = [(m.start(), _remedy(m, Relation.SET)) for m in MACHINE_REMEDY.finditer(text or "")]
    found += [(m.start(), _combined(m)) for m in COMBINED_REMEDY.finditer(text or "")]
    return [r for _, r in sorted(found, key=lambda x: x[0])]


def from_ledger(ledger: dict | None) -> list[Remedy]:
    """The remedies a tree's JSON ledger states (``remedies``, then ``combined_remedies``: the memory
    patches' ledger, docs/memory.md), as the refusal's lines would parse."""
    ledger = ledger or {}
    lines = [f"remedy: {r['flag']} = {r['value']}" for r in ledger.get("remedies") or []]
    lines += ["remedy: " + " ".join(f"{c['flag']} {c['value']}" for c in changes)
              for changes in ledger.get("combined_remedies") or []]
    return machine_remedies("\n".join(lines))


def parse_remedies(message: str) -> list[Remedy]:
    """Every machine-readable remedy line, in order; else the first other shape that matches."""
    lines = machine_remedies(message)
    if lines:
        return lines
    for pattern, relation in PROSE_REMEDIES:
        m = pattern.search(message or "")
        if m:
            return [_remedy(m, relation)]
    return []


def parse_remedy(message: str) -> Remedy | None:
    """The preferred remedy (the first that parse_remedies finds), or None."""
    found = parse_remedies(message)
    return found[0] if found else None
