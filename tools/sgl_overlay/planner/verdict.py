"""The verdict of one sizing run (pure): will it start, and its figures in
words."""

from __future__ import annotations

from .inputs import GIB, Memory

# The three answers, in the memory topic's words (docs/memory.md, the ledger's
# figures.case: fits / over_budget / cannot_run), and "cannot tell" (untestable).
# An over-budget start reads OVER_BUDGET + " by N GiB taken from the headroom (remedy ...)".
STARTS, OVER_BUDGET, WONT, UNKNOWN = "starts", "starts, over budget", "will not start", "cannot tell"
# Suggestion targets: 2 starts with everything asked, 1 starts short of it (fewer
# requests than asked, a pool shorter than the context) or over budget, 0 will not start.
FULL, STARTED = 2, 1


def rank(verdict: str, shortfall: list) -> int:
    if verdict == UNKNOWN:
        return -1
    if verdict == WONT:
        return 0
    return FULL if verdict == STARTS and not shortfall else STARTED


def judge(outcome: str, reason: str, f: dict, context_len: int, error: dict | None,
          requests_given: bool = True, tree_ledger: dict | None = None) -> tuple[str, list[str]]:
    """The verdict in the memory topic's three answers.  A tree that writes the
    memory ledger (the patched tree) decides it: its ``figures.case`` fits /
    over_budget / cannot_run is "starts" / "starts, over budget by N GiB taken
    from the headroom (remedy ...)" / "will not start"; other trees by their
    outcome (ok / refused or broken)."""
    tf = (tree_ledger or {}).get("figures") or {}
    if outcome == "ok" and tf.get("case") == "over_budget":
        rem = "; ".join(f"remedy: {r['flag']} = {r['value']}" for r in (tree_ledger or {}).get("remedies") or [])
        verdict = (f"{OVER_BUDGET} by {tf['over_budget_bytes'] / GIB:.2f} GiB taken from the headroom"
                   + f" ({rem or 'no remedy stated'})")
        return verdict, [f"SGLang starts with a warning: {(tree_ledger or {}).get('reason') or reason}"] + shortfall(
            f, context_len, requests_given)
    if outcome == "untestable":
        return UNKNOWN, [f"the harness could not drive this tree for these inputs: {reason}"]
    if outcome == "refused":
        return WONT, [f"SGLang refuses at start-up: {(error or {}).get('message') or reason}"
                      + (f" ({error.get('where')})" if error and error.get("where") else "")]
    if outcome == "broken":
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


def ledger(f: dict, m: Memory, context_len: int, mfs) -> dict:
    """The figures of one run, in words.  Byte figures are upstream's returned values;
    the derived lines (differences, products) only re-express them."""
    out: dict = {
        "free_before_weights_gib": round(m.pre_free_gib, 4),
        "free_after_weights_gib": round(m.post_free_gib, 4),
        "weights_per_rank_gib": round(m.weights_gib, 4),
        "memory_source": m.source,
        "mem_fraction_static": mfs,
    }
    avail = f.get("available_bytes")
    before, after = f.get("rest_before_mamba_gib"), f.get("rest_after_mamba_gib")
    if isinstance(before, (int, float)) and isinstance(after, (int, float)):
        # v0.5.11-v0.5.15 handle_max_mamba_cache(rest GiB) -> rest GiB: what the headroom
        # leaves for KV + state, and what the Mamba/speculative state took from it
        out["headroom_gib"] = round(m.post_free_gib - before, 4)
        out["kv_and_state_budget_gib"] = round(before, 4)
        out["mamba_reserved_gib"] = round(before - after, 4)
        out["kv_budget_gib"] = round(after, 4)
    elif isinstance(avail, (int, float)) and not f.get("mamba_cache_per_req_bytes"):
        # no state pools: upstream's available bytes are the KV budget
        out["headroom_gib"] = round(m.post_free_gib - avail / GIB, 4)
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


def exit_code(verdict: str) -> int:
    """0 it starts (within the budget, or over budget with the tree's warning),
    1 it will not start, 125 cannot tell (docs/plan.md)."""
    if verdict == STARTS or verdict.startswith(OVER_BUDGET):
        return 0
    return {WONT: 1, UNKNOWN: 125}[verdict]
