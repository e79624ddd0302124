"""The verdict of one sizing run (pure): will it start, and its figures in
words.  The verdict is a typed value (``Verdict``: its ``Kind`` and the
figures an over-budget start states), rendered to its sentence in one place
(``Verdict.text``), which is also its JSON form (docs/plan.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..harness.case import Case
from ..harness.outcome import Outcome
from ..harness.protocol import ErrorRecord
from ..harness.readings import given_exactly
from .inputs import GIB, Memory

# Suggestion targets: 2 starts with everything asked, 1 starts short of it (fewer
# requests than asked, a pool shorter than the context) or over budget, 0 will not start.
FULL, STARTED = 2, 1


class Kind(StrEnum):
    """The three answers, in the memory topic's words (docs/memory.md, the
    ledger's figures.case: fits / over_budget / cannot_run), "cannot tell"
    (the harness could not drive the tree), and "rejected" (tools/plan.py
    --releases: a release that rejects the inputs)."""

    STARTS = "starts"
    OVER_BUDGET = "over_budget"
    WONT = "will_not_start"
    UNKNOWN = "cannot_tell"
    REJECTED = "rejected"

    @property
    def words(self) -> str:
        return _WORDS[self]

    @property
    def starts(self) -> bool:
        """Starts: within the budget, or over budget with the tree's warning."""
        return self in (Kind.STARTS, Kind.OVER_BUDGET)

    @property
    def exit_code(self) -> int:
        """0 it starts (within the budget, or over budget with the tree's warning),
        1 it will not start, 125 cannot tell (docs/plan.md).  A rejected
        release has none of its own: its exit is its error's."""
        if self is Kind.REJECTED:
            raise ValueError("a rejected release's exit code is its error's (UsageError.code)")
        return {Kind.STARTS: 0, Kind.OVER_BUDGET: 0, Kind.WONT: 1, Kind.UNKNOWN: 125}[self]


_WORDS = {Kind.STARTS: "starts", Kind.OVER_BUDGET: "starts, over budget", Kind.WONT: "will not start",
          Kind.UNKNOWN: "cannot tell", Kind.REJECTED: "rejected"}


@dataclass(frozen=True)
class Verdict:
    """Will it start.  An over-budget start carries its figures: the bytes taken
    from the headroom and the remedies the tree's warning states, as (flag, value)."""

    kind: Kind
    over_budget_bytes: int | None = None
    remedies: tuple[tuple[str, object], ...] = ()

    @property
    def starts(self) -> bool:
        return self.kind.starts

    @property
    def exit_code(self) -> int:
        return self.kind.exit_code

    def _sentence(self) -> tuple[str, str | None]:
        """The verdict's words, and for an over-budget start the remedies as the tree states them."""
        if self.kind is not Kind.OVER_BUDGET:
            return self.kind.words, None
        rem = "; ".join(f"remedy: {flag} = {value}" for flag, value in self.remedies)
        return f"{self.kind.words} by {self.over_budget_bytes / GIB:.2f} GiB taken from the headroom", rem

    @property
    def text(self) -> str:
        """The verdict in words: "starts", "starts, over budget by N GiB taken
        from the headroom (remedy: --flag = value; ...)", "will not start",
        "cannot tell", "rejected"."""
        words, rem = self._sentence()
        return words if rem is None else f"{words} ({rem or 'no remedy stated'})"

    @property
    def headline(self) -> str:
        """The verdict line's text: the words upper-cased ("STARTS, OVER BUDGET BY 2.44 GIB ..."), the
        remedies as written, so that a flag and its value can be pasted (``--mem-fraction-static = 0.834``,
        never ``--MEM-FRACTION-STATIC``)."""
        words, rem = self._sentence()
        return words.upper() if rem is None else f"{words.upper()} ({rem or 'NO REMEDY STATED'})"

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> str:
        return self.text

    def rank(self, shortfall: list) -> int:
        """The suggestion search's scale: FULL, STARTED, 0 will not start, -1 cannot tell."""
        if self.kind in (Kind.UNKNOWN, Kind.REJECTED):
            return -1
        if self.kind is Kind.WONT:
            return 0
        return FULL if self.kind is Kind.STARTS and not shortfall else STARTED


STARTS, WONT, UNKNOWN, REJECTED = (Verdict(k) for k in (Kind.STARTS, Kind.WONT, Kind.UNKNOWN, Kind.REJECTED))


def judge(outcome: Outcome, reason: str, f: dict, context_len: int, error: ErrorRecord | None,
          requests_given: bool = True, tree_ledger: dict | None = None) -> tuple[Verdict, list[str]]:
    """The verdict in the memory topic's three answers.  A tree that writes the
    memory ledger (the patched tree) decides it: its ``figures.case`` fits /
    over_budget / cannot_run is STARTS / OVER_BUDGET (with the bytes taken from
    the headroom and the warning's remedies) / WONT; other trees by their
    outcome (ok / refused or broken)."""
    tf = (tree_ledger or {}).get("figures") or {}
    if outcome is Outcome.OK and Case.of(tree_ledger) is Case.OVER_BUDGET:
        verdict = Verdict(Kind.OVER_BUDGET, tf["over_budget_bytes"],
                          tuple((r["flag"], r["value"]) for r in (tree_ledger or {}).get("remedies") or []))
        return verdict, [f"SGLang starts with a warning: {(tree_ledger or {}).get('reason') or reason}"] + shortfall(
            f, context_len, requests_given)
    if outcome is Outcome.UNTESTABLE:
        return UNKNOWN, [f"the harness could not drive this tree for these inputs: {reason}"]
    if outcome is Outcome.REFUSED:
        return WONT, [f"SGLang refuses at start-up: {(error.message if error else None) or reason}"
                      + (f" ({error.where})" if error and error.where else "")]
    if outcome is Outcome.BROKEN:
        why = []
        reqs, tokens, slots = f.get("max_running_requests"), f.get("max_total_num_tokens"), f.get("max_mamba_cache_size")
        if reqs is not None and reqs <= 0:
            why.append(f"the sizing ends with {reqs} running requests; the scheduler's TpModelWorker then "
                       f"asserts 'max_running_request is zero' (or CUDA-graph capture fails first)")
        if tokens is not None and tokens <= 0:
            why.append(f"the KV pool gets {tokens} tokens")
        if slots is not None and slots <= 0:
            why.append(f"the Mamba state pool gets {slots} slots")
        if not why:
            why.append(reason + " (the tree's own assertion: the server dies at start-up; if the assertion "
                       "is about an input, the harness may not supply it yet: docs/results/regress.md, 'Open points')")
        return WONT, why
    why = shortfall(f, context_len, requests_given)
    return STARTS, why or [reason]


def shortfall(f: dict, context_len: int, requests_given: bool = True) -> list[str]:
    """What a start gives less of than asked, in words (not part of the verdict)."""
    why = []
    asked = f.get("max_running_requests_flag")
    reqs = f.get("max_running_requests")
    if asked is not None and reqs is not None and reqs < asked:
        why.append(f"{reqs} running request{'s' if reqs != 1 else ''}, fewer than the {asked} "
                   + ("asked for with --max-running-requests" if requests_given
                      else "the release's own rules set (--max-running-requests was not given)"))
    tokens = f.get("max_total_num_tokens")
    if tokens is not None and tokens < context_len:
        why.append(f"the KV pool holds {tokens:,} tokens, shorter than the context length {context_len:,}: "
                   f"the longest request is {min(context_len, tokens) - 1:,} tokens")
    return why


def ledger(f: dict, m: Memory, context_len: int, mfs, readings: dict | None = None) -> dict:
    """The figures of one run, in words.  Byte figures are upstream's returned values;
    the derived lines (differences, products) only re-express them.  ``readings``: the run's
    readings (harness/readings.py), whose used values are the sizing's own."""
    out: dict = {
        "free_before_weights_gib": round(m.pre_free_gib, 4),
        "free_after_weights_gib": round(m.post_free_gib, 4),
        "weights_per_rank_gib": round(m.weights_gib, 4),
        "memory_source": m.source,
        "readings": str(m.kind),
        "mem_fraction_static": mfs,
    }
    post = m.post_free_gib
    if readings and not given_exactly(readings):
        # the sizing's own readings at the span's pessimistic end, which this run used
        out["sizing_pre_reading_gib"] = round(readings["pre_used_gib"], 4)
        out["sizing_post_reading_gib"] = round(readings["post_used_gib"], 4)
        post = readings["post_used_gib"]
    avail = f.get("available_bytes")
    before, after = f.get("rest_before_mamba_gib"), f.get("rest_after_mamba_gib")
    if isinstance(before, (int, float)) and isinstance(after, (int, float)):
        # v0.5.11-v0.5.15 handle_max_mamba_cache(rest GiB) -> rest GiB: what the headroom
        # leaves for KV + state, and what the Mamba/speculative state took from it
        out["headroom_gib"] = round(post - before, 4)
        out["kv_and_state_budget_gib"] = round(before, 4)
        out["mamba_reserved_gib"] = round(before - after, 4)
        out["kv_budget_gib"] = round(after, 4)
    elif isinstance(avail, (int, float)) and not f.get("mamba_cache_per_req_bytes"):
        # no state pools: upstream's available bytes are the KV budget
        out["headroom_gib"] = round(post - avail / GIB, 4)
        out["kv_budget_gib"] = round(avail / GIB, 4)
    elif isinstance(avail, (int, float)):
        out["kv_budget_gib"] = round(avail / GIB, 4)
    per_req = f.get("mamba_cache_per_req_bytes")
    slots = f.get("max_mamba_cache_size")
    if per_req:
        out["mamba_state_per_slot_bytes"] = per_req
        out["mamba_slots"] = slots
        if isinstance(slots, int) and slots > 0:
            out["mamba_state_gib"] = round(slots * per_req / GIB, 4)
            if "mamba_reserved_gib" in out:
                out["speculative_intermediate_state_gib"] = round(out["mamba_reserved_gib"] - out["mamba_state_gib"], 4)
    out["speculative_num_draft_tokens"] = f.get("speculative_num_draft_tokens")
    cell = f.get("cell_size_bytes")
    out["cell_size_bytes_per_token"] = cell
    tokens = f.get("max_total_num_tokens")
    out["kv_tokens"] = tokens
    if isinstance(tokens, int) and cell:
        out["kv_pool_gib"] = round(tokens * cell / GIB, 4)
    out["running_requests"] = f.get("max_running_requests")
    out["running_requests_asked"] = f.get("max_running_requests_flag")
    out["context_length"] = context_len
    if isinstance(tokens, int) and tokens > 0:
        # managers/tp_worker.py: max_req_len = min(context_len - 1, max_token_pool_size - 1)
        out["max_request_tokens"] = min(context_len - 1, tokens - 1)
    return out
