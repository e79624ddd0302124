"""The remedy search: the fewest flag changes that make a start-up fit, found by probing.

One engine for the two places that answer "what do I change?": the patched SGLang
server's refusal (its sizing dry-runs itself as the probe) and sgl-overlay's planner
(``tools/plan.py``: each probe is a run of the release's real sizing code).  The
search is pure: a caller gives the flags a user can change (``Knob``: the values to
try, nearest to what was asked first) and a ``probe`` that says whether a set of
changes starts; the search returns the smallest change sets that start, each one a
probe's own answer, so applying it works.

The order: every single flag, then every pair, then every triple (``max_flags``),
each set tried first with every flag at its far end (a set that cannot start costs one
probe), then relaxed flag by flag back toward what was asked, the costliest give-up
first (running requests, context, acceptance ... and the headroom that
--mem-fraction-static takes, last), so a remedy keeps as much of the request as the
card allows.  A set that holds a smaller set that starts is not tried.  "Nothing
starts" is said only when every set up to ``max_flags`` of the searched flags was
tried (``Search.exhausted``), and the searched flags are named.

Each flag's values are assumed monotone (a value further from what was asked never
makes a start fail that a nearer one allowed); a flag with a few values is scanned
instead of bisected.  Standard library only: SGLang's server carries this file as
``sglang/srt/model_executor/memory_remedy.py`` (the memory topic's
remedy-search patch), and a test keeps the two identical.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


class GivesUp(str, Enum):
    """What a change costs the user, in words; the order is the relaxing order
    (the first is given back first)."""

    REQUESTS = "running requests"
    CONTEXT = "context length"
    ACCEPTANCE = "speculative tokens per step (acceptance)"
    KV_PRECISION = "KV-cache precision"
    PREFIX_CACHE = "Mamba prefix caching"
    MAMBA_SLOTS = "spare Mamba state slots"
    HEADROOM = "headroom for activations and CUDA graphs"

    @property
    def cost(self) -> int:
        return _COST[self]


_COST = {g: len(GivesUp) - i for i, g in enumerate(GivesUp)}


@dataclass(frozen=True)
class Knob:
    """A flag the user can change: its values to try, nearest to the asked value first
    (the asked value itself is not among them)."""

    flag: str  # the command-line flag, e.g. "--max-running-requests"
    field: str  # the ServerArgs field, e.g. "max_running_requests"
    values: Tuple[Any, ...]
    gives_up: GivesUp
    asked: Any = None  # the value the command gives (or its default): what a change moves away from

    @property
    def far(self) -> int:
        return len(self.values) - 1


@dataclass(frozen=True)
class Change:
    knob: Knob
    value: Any

    @property
    def argv(self) -> List[str]:
        return [self.knob.flag, _text(self.value)]

    @property
    def words(self) -> str:
        was = "" if self.knob.asked is None else f" (was {_text(self.knob.asked)})"
        return f"{self.knob.flag} {_text(self.value)}{was}: gives up {self.knob.gives_up.value}"


@dataclass(frozen=True)
class Remedy:
    """A change set that starts: its changes and the probe's answer for it."""

    changes: Tuple[Change, ...]
    answer: Any  # the probe's own result for exactly these changes

    @property
    def fields(self) -> Dict[str, Any]:
        return {c.knob.field: c.value for c in self.changes}

    @property
    def argv(self) -> List[str]:
        return [word for c in self.changes for word in c.argv]

    @property
    def line(self) -> str:
        """The machine-readable line a refusal ends with: ``remedy: --flag value [--flag value ...]``,
        the flags as a command line takes them (tools parse it back: harness/remedy.py)."""
        return "remedy: " + " ".join(self.argv)

    @property
    def gives_up(self) -> Tuple[GivesUp, ...]:
        return tuple(c.knob.gives_up for c in self.changes)


@dataclass(frozen=True)
class Search:
    remedies: Tuple[Remedy, ...]  # the smallest change sets that start, best first
    searched: Tuple[str, ...]  # the flags searched
    max_flags: int
    probes: int
    tried: Tuple[Tuple[str, ...], ...] = field(default=())  # the flag sets tried, in order

    @property
    def found(self) -> bool:
        return bool(self.remedies)

    def nothing_starts(self) -> str:
        """The words for a search that found nothing: every set of up to ``max_flags`` of the
        searched flags was tried (a search stops early only once it has found remedies)."""
        return (f"no change of up to {self.max_flags} of these flags starts it: "
                + ", ".join(self.searched))


# probe_all([fields, ...]) -> [(starts, answer), ...], one per change set, in order: each
# ``fields`` is {ServerArgs field: value}, the changes applied to the command as given
ProbeAll = Callable[[List[Dict[str, Any]]], List[Tuple[bool, Any]]]


def _text(value) -> str:
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)


def search(knobs: Sequence[Knob], probe_all: ProbeAll, max_flags: int = 3, want: int = 3,
           progress: Optional[Callable[[str], None]] = None) -> Search:
    """The smallest change sets of ``knobs`` that start, by ``probe_all``.

    Sets of one flag come before sets of two, and so on; a size's sets are probed at
    their far ends together (one batch), then those that start are relaxed, the sets
    that give up the least first, until ``want`` remedies are found.  A size that finds
    any ends the search."""
    knobs = [k for k in knobs if k.values]
    found: List[Remedy] = []
    tried: List[Tuple[str, ...]] = []
    probes = 0

    def run(batch):
        nonlocal probes
        probes += len(batch)
        return probe_all([dict(f) for f in batch])

    for size in range(1, min(max_flags, len(knobs)) + 1):
        combos = sorted(itertools.combinations(knobs, size), key=lambda ks: sum(k.gives_up.cost for k in ks))
        if progress:
            progress(f"sets of {size} flag{'s' if size > 1 else ''}: {len(combos)} at their far ends")
        corners = run([{k.field: k.values[k.far] for k in combo} for combo in combos])
        tried += [tuple(k.flag for k in combo) for combo in combos]
        for combo, (ok, answer) in zip(combos, corners):
            if len(found) >= want:
                break
            if ok:
                if progress:
                    progress(f"relaxing {' + '.join(k.flag for k in combo)} toward what was asked")
                found.append(_relax(combo, answer, run))
        if found:
            break
    return Search(tuple(found), tuple(k.flag for k in knobs), max_flags, probes, tuple(tried))


def _relax(combo: Sequence[Knob], answer, run) -> Remedy:
    """The set starts with every flag at its far end (``answer``): each flag moved back
    toward its asked value as far as it still starts, the costliest give-up first."""
    at = {k.field: k.far for k in combo}
    best = answer
    for k in sorted(combo, key=lambda k: -k.gives_up.cost):
        idx, ans = _nearest(k, at, combo, run)
        if ans is not None:
            at[k.field], best = idx, ans
    order = sorted(combo, key=lambda k: -k.gives_up.cost)  # the costliest give-up first, as a user reads it
    return Remedy(tuple(Change(k, k.values[at[k.field]]) for k in order), best)


def _nearest(k: Knob, at: dict, combo, run):
    """The index of ``k``'s value nearest its asked value that still starts, the other flags
    as ``at`` holds them (its current index starts); (index, answer), answer None where no
    nearer value starts."""
    def fields(i):
        return {c.field: c.values[i if c is k else at[c.field]] for c in combo}

    far = at[k.field]
    if far < 4:  # a few values: all probed at once, the nearest that starts wins
        for i, (ok, ans) in enumerate(run([fields(i) for i in range(far)])):
            if ok:
                return i, ans
        return far, None
    lo, hi, best = -1, far, None  # lo fails (-1: not probed), hi starts
    while hi - lo > 1:
        mid = (lo + hi) // 2
        (ok, ans), = run([fields(mid)])
        if ok:
            hi, best = mid, ans
        else:
            lo = mid
    return hi, best


# -- the flags, as both callers offer them ------------------------------------------------

# The highest --mem-fraction-static a remedy sets: the headroom above it holds activations and CUDA
# graphs, which the sizing does not model (the planner's bound since its first suggestions).
FRACTION_CAP = 0.95
# Remedies state --mem-fraction-static to this many decimals (the memory patches' refusals).
FRACTION_DECIMALS = 3


def fraction_knob(asked: float, cap: float = FRACTION_CAP) -> Knob:
    """--mem-fraction-static above the asked value, up to ``cap``, on a 0.001 grid."""
    scale = 10 ** FRACTION_DECIMALS
    first = int(asked * scale + 1e-9) + 1
    values = tuple(k / scale for k in range(first, int(round(cap * scale)) + 1))
    return Knob("--mem-fraction-static", "mem_fraction_static", values, GivesUp.HEADROOM, asked)


def requests_knob(asked: int) -> Knob:
    """--max-running-requests below the asked count, down to one."""
    return Knob("--max-running-requests", "max_running_requests", tuple(range(asked - 1, 0, -1)),
                GivesUp.REQUESTS, asked)


def context_knob(asked: int, step: int = 1024) -> Knob:
    """--context-length: the multiples of ``step`` below the asked length, down to ``step``."""
    return Knob("--context-length", "context_length", tuple(k * step for k in range((asked - 1) // step, 0, -1)),
                GivesUp.CONTEXT, asked)


def kv_dtype_knob(asked: str) -> Knob:
    """--kv-cache-dtype fp8_e4m3 for a bf16/fp16 KV cache (half the cell)."""
    values = () if str(asked).startswith("fp8") else ("fp8_e4m3",)
    return Knob("--kv-cache-dtype", "kv_cache_dtype", values, GivesUp.KV_PRECISION, asked)


def mamba_slots_knob(asked: int, needed: int) -> Knob:
    """--max-mamba-cache-size lowered to the slots the asked requests need."""
    values = (needed,) if 0 < needed < asked else ()
    return Knob("--max-mamba-cache-size", "max_mamba_cache_size", values, GivesUp.MAMBA_SLOTS, asked)


def draft_tokens_knob(flag: str, field_name: str, asked: int) -> Knob:
    """The speculative verify width (--speculative-dflash-block-size for DFLASH, else
    --speculative-num-draft-tokens) below the asked one, down to two."""
    return Knob(flag, field_name, tuple(range(asked - 1, 1, -1)), GivesUp.ACCEPTANCE, asked)


def radix_strategy_knob(flag: str, field_name: str, asked: str) -> Knob:
    """The Mamba radix-cache strategy extra_buffer -> no_buffer (no extra state slots for prefix caching)."""
    values = ("no_buffer",) if asked == "extra_buffer" else ()
    return Knob(flag, field_name, values, GivesUp.PREFIX_CACHE, asked)
