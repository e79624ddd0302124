"""Plain-text rendering of a plan (people); --json prints the dict itself."""

from __future__ import annotations

from ..cli import table
from ..harness.environment import describe
from ..harness.readings import given_exactly
from .verdict import Kind

ROWS = (
    ("free_before_weights_gib", "free before weights (GiB)"),
    ("weights_per_rank_gib", "weights per rank (GiB)"),
    ("free_after_weights_gib", "free after weights (GiB)"),
    ("sizing_pre_reading_gib", "sizing's pre-load reading (GiB)"),
    ("sizing_post_reading_gib", "sizing's post-load reading (GiB)"),
    ("mem_fraction_static", "--mem-fraction-static"),
    ("headroom_gib", "headroom, not for KV/state (GiB)"),
    ("kv_and_state_budget_gib", "KV + state budget (GiB)"),
    ("mamba_reserved_gib", "Mamba + spec state reserved (GiB)"),
    ("mamba_slots", "Mamba slots"),
    ("mamba_state_per_slot_bytes", "Mamba state per slot (B)"),
    ("mamba_state_gib", "Mamba slots' state (GiB)"),
    ("speculative_intermediate_state_gib", "spec intermediate states (GiB)"),
    ("speculative_num_draft_tokens", "draft tokens per step"),
    ("kv_budget_gib", "KV budget (GiB)"),
    ("cell_size_bytes_per_token", "KV cell per token (B)"),
    ("kv_tokens", "KV tokens"),
    ("kv_pool_gib", "KV pool (GiB)"),
    ("running_requests", "running requests"),
    ("running_requests_asked", "running requests asked"),
    ("context_length", "context length"),
    ("max_request_tokens", "max request length (tokens)"),
)


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def ledger_rows(ledgers: list[dict]) -> list[list[str]]:
    rows = []
    for key, label in ROWS:
        vals = [led.get(key) for led in ledgers]
        if all(v is None for v in vals):
            continue
        rows.append([label] + [_fmt(v) for v in vals])
    return rows


def resolution_line(c: dict) -> str:
    def short(v):
        s = repr(v)
        return s if len(s) <= 60 else s[:57] + "..."
    return f"{c['flag']}: {short(c['given'])} -> {short(c['resolved'])}, by {c['rule']}"


def readings_lines(r: dict) -> list[str]:
    """The readings' span in words: what widens it, and each figure's least and most over it."""
    rd, rng = r.get("readings") or {}, r.get("range")
    if not rd or given_exactly(rd):
        return []
    out = ["", "the sizing's own readings, from the given ones (the ledger: the pessimistic end, the smallest budget):"]
    out += [f"  {t['reading']} {t['name']}: {t['lo_bytes'] / (1 << 20):+g} to {t['hi_bytes'] / (1 << 20):+g} MiB "
            f"({t['source']})" if t["lo_bytes"] != t["hi_bytes"] else
            f"  {t['reading']} {t['name']}: {t['lo_bytes'] / (1 << 20):+g} MiB ({t['source']})" for t in rd["terms"]]
    out += [f"  note: {n}" for n in rd.get("notes") or []]
    if rng:
        spans = ", ".join(f"{k} {lo:,}-{hi:,}" if lo != hi else f"{k} {lo:,}" for k, (lo, hi) in rng["figures"].items())
        out.append(f"  over the span ({rng['runs']} runs): {spans or 'no start'}"
                   + (f"; at the optimistic end: {rng['optimistic']['outcome']}"
                      if rng["optimistic"]["outcome"] != r["outcome"] else ""))
    return out


def text(report: dict) -> str:
    """The whole plan in words: the verdict's part, then the rest."""
    rest = tail_text(report)
    return head_text(report) + ("\n" + rest if rest else "")


def head_text(report: dict) -> str:
    """The inputs, the assumptions, the ledger and the verdict: what the first sizing run answers."""
    r = report
    settings = describe(r.get("environment") or {})
    lines = [f"SGLang {r['tree']['release']} ({r['tree']['layout']} layout) at {r['tree']['root']}",
             f"model {r['model']['architecture']} ({r['model']['config']})"
             + (f", drafter {r['draft']['path']}" if r.get("draft") else "")
             + (f", GPU {r['gpu']['name']}" if r.get("gpu") else "") + f", TP {r['tp']}",
             "flags: " + (" ".join(r["flags"]) or "(none)"), *([settings] if settings else []), ""]
    if r["tree"].get("warning"):
        lines[1:1] = [f"WARNING: {r['tree']['warning']}"]
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in r["assumptions"]]
    lines.append("")
    if r.get("resolution"):
        lines.append("flags the release's own ServerArgs resolution changed (flag: given -> resolved, by RULE):")
        lines += [f"  {resolution_line(c)}" for c in r["resolution"]]
        lines.append("")
    lines.append(table(ledger_rows([r["ledger"]]), ["ledger", "value"]))
    lines += readings_lines(r)
    lines.append("")
    lines.append(f"VERDICT: {r['verdict'].headline}")
    lines += [f"  {w}" for w in r["why"]]
    return "\n".join(lines)


def tail_text(report: dict) -> str:
    """The sensitivity, the tree's own remedies re-run, and the suggestions."""
    r, lines = report, []
    sens = r.get("sensitivity")
    if sens:
        def d(k):
            x = sens[k]["delta_tokens"]
            return "-" if x is None else f"{x:+,}"
        lines.append("")
        lines.append(f"sensitivity (each a re-run; {sens['step_gib']} GiB steps): free memory "
                     f"+{sens['step_gib']} GiB -> {d('free_memory_plus')} tokens, "
                     f"-{sens['step_gib']} GiB -> {d('free_memory_minus')}; weights "
                     f"+{sens['step_gib']} GiB -> {d('weights_plus')}, -{sens['step_gib']} GiB -> {d('weights_minus')}")
    if r.get("tree_remedies"):
        lines.append("")
        lines.append("the tree's own remedies, each re-run through the same sizing code:")
        rows = [[" ".join(t["argv"]), "works" if t["works"] else "does not work", t["verdict"].text,
                 _fmt(t["ledger"].get("kv_tokens")), _fmt(t["ledger"].get("running_requests"))]
                for t in r["tree_remedies"]]
        lines.append(table(rows, ["stated remedy", "re-run", "verdict", "KV tokens", "requests"]))
    lines += suggestion_lines(r)
    return "\n".join(lines)


def suggestion_lines(r: dict) -> list[str]:
    """The remedy search's answer: the change sets that start, or the space searched without one."""
    search = r.get("search")
    if search is None:
        return []
    goal = "start" if r["verdict"].kind is Kind.WONT else "start with everything asked"
    if not r["suggestions"]:
        return ["", f"nothing found to make it {goal}: {search['nothing_starts']} "
                    f"({search['probes']} sizing runs)"]
    lines = ["", f"changes that make it {goal}, smallest first (each re-run through the same sizing code; "
                 f"{search['probes']} runs):"]
    rows = [[" ".join(s["argv"]), "; ".join(c["gives_up"] for c in s["changes"]), s["verdict"].text,
             _fmt(s["ledger"].get("kv_tokens")), _fmt(s["ledger"].get("running_requests")),
             _fmt(s["ledger"].get("mamba_slots")), _fmt(s["ledger"].get("headroom_gib"))] for s in r["suggestions"]]
    lines.append(table(rows, ["change", "gives up", "verdict", "KV tokens", "requests", "Mamba slots",
                              "headroom GiB"]))
    return lines


def compare_text(reports: list[dict]) -> str:
    heads = ["", *[r["tree"]["release"] for r in reports]]
    rows = ledger_rows([r.get("ledger", {}) for r in reports])
    rows.append(["verdict"] + [r["verdict"].text for r in reports])
    out = [table(rows, heads), ""]
    settings = describe(next((r["environment"] for r in reports if r.get("environment")), {}))
    if settings:
        out[:0] = [settings, ""]
    for r in reports:
        out.append(f"{r['tree']['release']}: {r['verdict'].text}: " + "; ".join(r["why"]))
    return "\n".join(out)
