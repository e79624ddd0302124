"""The end-to-end check's reading of a server start-up (pure; tests/gpu/test_e2e_logic.py
against logs recorded on an H200, tests/gpu/data): the figures of its log (avail mem,
KV/Mamba allocation, decided counts, server_args, errors, remedy lines), the patched
tree's memory ledger JSON (SGLO_MEMORY_LEDGER), and the run's outcome.

The remedy lines are read by the library's one remedy parser
(tools/sgl_overlay/harness/remedy.py), loaded by its path: the GPU machine runs these
scripts from a copy of the tree, where sgl_overlay is no installed package."""
import json
import re
from enum import StrEnum
from pathlib import Path

from .pathload import load


HERE = Path(__file__).resolve().parent
GIB = 1 << 30
remedy = load(HERE.parent / "sgl_overlay" / "harness" / "remedy.py", "sgl_overlay_harness_remedy")

_NUM = r"([-\d.]+)"
PATTERNS = {
    "load_begin_avail_gib": re.compile(r"Load weight begin\. avail mem=" + _NUM + " GB"),
    "load_end_avail_gib": re.compile(r"Load weight end\..*?avail mem=" + _NUM + " GB"),
    "weights_gib": re.compile(r"Load weight end\..*?mem usage=" + _NUM + " GB"),
    "pool_end_avail_gib": re.compile(r"Memory pool end\. avail mem=" + _NUM + " GB"),
}
KV_LINE = re.compile(r"KV Cache is allocated\. (.*)$")
MAMBA_LINE = re.compile(r"Mamba Cache is allocated\. (.*)$")
DECIDED = re.compile(r"max_total_num_tokens=(\d+).*?max_running_requests=(\d+)")
SERVER_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)\s*$")
ERROR = re.compile(r"^\s*((?:[A-Za-z_.]+Error|MemoryBudgetError|Exception)(?::.*)?)$")
SERVER_ARG_KEYS = ("mem_fraction_static", "max_running_requests", "max_total_tokens", "context_length",
                   "chunked_prefill_size", "cuda_graph_max_bs", "max_mamba_cache_size", "mamba_scheduler_strategy",
                   "kv_cache_dtype", "speculative_algorithm", "speculative_num_draft_tokens",
                   "speculative_dflash_block_size", "attention_backend", "disable_radix_cache", "page_size")


def _pairs(text):
    """`#tokens: 11893, K size: 1.23 GB` -> {"tokens": 11893, "K_size_gib": 1.23}."""
    out = {}
    for key, value, unit in re.findall(r"#?([A-Za-z_ ]+?): ([-\d.]+) ?(GB)?(?:,|$)", text):
        key = key.strip().replace(" ", "_") + ("_gib" if unit else "")
        out[key] = float(value) if "." in value or unit else int(value)
    return out


def parse_log(text):
    """The figures a start-up log gives (GiB with 2 decimals, as SGLang logs them)."""
    r = {"kv_cache": [], "mamba_cache": [], "errors": [], "remedies": []}
    for line in text.splitlines():
        for key, pat in PATTERNS.items():
            m = pat.search(line)
            if m and key not in r:
                r[key] = float(m.group(1))
        if (m := KV_LINE.search(line)):
            r["kv_cache"].append(_pairs(m.group(1)))
        if (m := MAMBA_LINE.search(line)):
            r["mamba_cache"].append(_pairs(m.group(1)))
        if (m := DECIDED.search(line)) and "max_total_num_tokens" not in r:
            r["max_total_num_tokens"], r["max_running_requests"] = int(m.group(1)), int(m.group(2))
        if (m := SERVER_ARGS.search(line)) and "server_args" not in r:
            body = m.group(1)
            r["server_args"] = {k: _literal(v) for k in SERVER_ARG_KEYS
                                for v in re.findall(rf"(?<![a-z_]){k}=('[^']*'|[^,()]+)", body)[:1]}
        if (m := ERROR.match(line)):
            r["errors"].append(m.group(1).strip())
    r["errors"] = list(dict.fromkeys(r["errors"]))
    r["remedies"] = [remedy_entry(x) for x in remedy.machine_remedies(text)]
    return r


def _literal(v):
    v = v.strip()
    if v.startswith("'"):
        return v.strip("'")
    if v in ("True", "False"):
        return v == "True"
    if v == "None":
        return None
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def parse_ledger(text):
    """The memory ledger JSON (docs/memory.md), in the figures the report shows."""
    d = json.loads(text)
    f = d.get("figures", {})
    res = d.get("reservations", {})
    return {"outcome": d.get("outcome"), "reason": d.get("reason"), "remedies": d.get("remedies", []),
            "case": f.get("case"),
            "pre_load_free_gib": _gib(f.get("pre_load_free_bytes")), "post_load_free_gib": _gib(f.get("post_load_free_bytes")),
            "budget_gib": _gib(f.get("budget_bytes")), "max_total_num_tokens": f.get("max_total_num_tokens"),
            "max_running_requests": f.get("max_running_requests"), "max_mamba_cache_size": f.get("max_mamba_cache_size"),
            "reserved_gib": {k: _gib(v.get("bytes")) for k, v in res.items() if isinstance(v, dict)}}


def _gib(b):
    return None if b is None else round(b / GIB, 3)


def remedy_entry(r):
    """A remedy as the report gives it: {"flag": "mem-fraction-static", "value": "0.797"} (the
    value as written: the remedy re-run passes it on as it is); a remedy of several flags lists
    the others under "also", each the same shape."""
    entry = {"flag": r.flag.removeprefix("--"), "value": r.text}
    if r.also:
        entry["also"] = [{"flag": x.flag.removeprefix("--"), "value": x.text} for x in r.also]
    return entry


def remedy_words(entry):
    """A report's remedy as a command line takes it: "--max-running-requests 3 --mem-fraction-static 0.925"."""
    return " ".join(f"--{x['flag']} {x['value']}" for x in [entry, *entry.get("also", [])])


class Outcome(StrEnum):
    """How a server start ended (outcome): it served, it refused with a stated remedy or bound, or it failed."""
    OK = "ok"
    REFUSED = "refused"
    FAILED = "failed"


def outcome(run):
    """The run's Outcome, from what it saw: REFUSED when the log states a remedy (the patched
    tree's lines, upstream's "Raise --mem-fraction-static above 0.587") or says there is not
    enough GPU memory."""
    if run.get("healthy"):
        return Outcome.OK
    log = run.get("log_figures", {})
    if log.get("remedies") or any("Not enough GPU memory" in e or stated_bound(e) for e in log.get("errors", [])):
        return Outcome.REFUSED
    return Outcome.FAILED


def stated_bound(error):
    """The error line states a bound to move a flag past (upstream's "Raise --flag above N")."""
    return any(r.relation is remedy.Relation.ABOVE for r in remedy.parse_remedies(error))

