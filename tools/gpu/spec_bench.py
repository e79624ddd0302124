"""The speculative-value benchmark (tools.gpu.spec_value): which configurations, with which
server flags, measured how, summarised how, and the projection for another card.

- Configurations (`configs`): AR (no speculation), DFLASH (the drafter's chain) and DDTREE at each
  budget; a name alone runs with SGLang's overlap scheduler off (`--disable-overlap-schedule`, as
  every record before the pin moved to v0.5.17: the v1 DDTREE worker refused overlap), a name with
  the suffix `/overlap` (`DDTREE-16/overlap`) with it on, SGLang's default. Ratios compare a
  configuration with AR and DFLASH of the same scheduling.
- A measurement (`closed_loop`): `concurrency` client threads, each sending the next prompt when
  its last one is answered, so the server holds that many requests; per request SGLang's own
  meta_info (completion_tokens, spec_verify_ct, e2e_latency, and with --enable-metrics the
  scheduler's prefill_finished_time and the tokenizer's request_received_ts / request_finished_ts).
- Its figures (`summarise`): committed tokens/s = completion tokens / the loop's wall time;
  acceptance length = completion tokens / verify steps (SGLang's spec_verify_ct, summed:
  e2e_lossless.acceptance; AR commits one token a step); per-step time = each request's decode
  time (from the end of its prefill, when the scheduler has its first token, to its finish) over its
  decode steps (spec_verify_ct, or completion_tokens - 1 for AR), the median over requests; the
  time to the first token (request received to prefill finished), the median over requests.
  Not meta_info's decode_throughput: it counts from the first output the tokenizer receives, and the
  scheduler sends a non-streaming request's output only when its length is a multiple of 50
  (SGLANG_FORCE_STREAM_INTERVAL) or it finishes, so its window starts at token 50 for AR and, for a
  drafter that commits several tokens a step, wherever a step lands on a multiple of 50 (records
  before 2026-12-04 evening: their step figures are that window's, docs/results/spec-value.md).
- Repeats: rounds over every (batch, configuration), configurations interleaved within a round
  (drift falls on all alike); `medians` takes each figure's median over the rounds.
- `projection`: the speed-up over AR that a measured per-step cost ratio gives at published
  acceptance lengths, labelled as a projection.

Everything but `closed_loop` is pure (tests/gpu/test_spec_bench.py)."""
import json
import re
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

from . import e2e_lossless as lossless


BATCHES = (1, 4, 16, 32)
# what step_ms measures (a report's "step_definition"; reports without one used decode_throughput's window)
STEP_DEFINITION = "prefill_finished_time to request_finished_ts"
# what closed_loop keeps of a response's meta_info
META_KEYS = ("completion_tokens", "spec_verify_ct", "spec_num_correct_drafts", "e2e_latency",
             "prefill_finished_time", "request_received_ts", "request_finished_ts")
BUDGETS = (8, 16, 32, 63)

# published acceptance lengths (temperature 0) for the projection: the DDTree paper (arXiv 2604.12989,
# liranringel/ddtree src/data/results.tex, best node budget) and a Qwen3.6-27B DDTree run (Lucebox PR #86)
PUBLISHED = (
    {"source": "DDTree paper, Qwen3-8B, MATH-500", "DFLASH": 7.79, "DDTREE": 10.73},
    {"source": "DDTree paper, Qwen3-Coder-30B-A3B, HumanEval", "DFLASH": 8.02, "DDTREE": 10.72},
    {"source": "Lucebox PR #86, Qwen3.6-27B Q5, DDTree budget 22 (RTX 5090)", "DFLASH": None, "DDTREE": 7.12},
)


OVERLAP = "/overlap"          # the name's suffix of a configuration run with the overlap scheduler on
# DDTREE-<budget>-eager: the tree built eagerly after the draft forward (the worker's draft head not
# folded into the draft CUDA graphs: SGLANG_DFLASH_EAGER_DRAFT_SAMPLER=1), the in-graph head's baseline
EAGER_TREE = "-eager"
EAGER_TREE_ENV = {"SGLANG_DFLASH_EAGER_DRAFT_SAMPLER": "1"}
# DDTREE-<budget>-chain<K>: with --speculative-ddtree-chain-batch K (steps of K requests or more verify
# DFlash's chain, smaller ones the tree)
CHAIN = "-chain"
# DDTREE-<budget>-adaptive: with --speculative-ddtree-adaptive (each step the tree or DFlash's chain,
# whichever the server measured faster at its batch size)
ADAPTIVE = "-adaptive"
# a configuration's name: the algorithm, DDTREE's budget, its variants, the scheduling
NAME = re.compile(r"^(?:AR|DFLASH|DDTREE-(?P<budget>[1-9][0-9]*)(?P<eager>-eager)?"
                  r"(?:-chain(?P<chain>[1-9][0-9]*)|(?P<adaptive>-adaptive))?)"
                  r"(?P<overlap>/overlap)?$")


class Algorithm(StrEnum):
    """A speculative configuration's --speculative-algorithm (AR: none)."""
    DFLASH = "DFLASH"
    DDTREE = "DDTREE"


@dataclass(frozen=True)
class Config:
    name: str                     # "AR", "DFLASH", "DDTREE-16", "DDTREE-16/overlap", "DDTREE-63-chain16/overlap"
    algorithm: Optional[Algorithm]      # None: AR
    budget: Optional[int] = None
    overlap: bool = False         # SGLang's overlap scheduler (off: --disable-overlap-schedule)
    eager_tree: bool = False      # DDTREE: the tree built outside the draft CUDA graph
    chain_batch: Optional[int] = None  # DDTREE: --speculative-ddtree-chain-batch
    adaptive: bool = False        # DDTREE: --speculative-ddtree-adaptive

    @property
    def speculative(self):
        return self.algorithm is not None

    @property
    def env(self):
        """The server's environment for this configuration (beyond the check's own)."""
        return dict(EAGER_TREE_ENV) if self.eager_tree else {}


def _named(base, overlap):
    return base + (OVERLAP if overlap else "")


def split_name(name):
    """'DDTREE-16/overlap' -> ('DDTREE-16', True); 'DFLASH' -> ('DFLASH', False)."""
    return (name[:-len(OVERLAP)], True) if name.endswith(OVERLAP) else (name, False)


def configs(budgets=BUDGETS, algorithms=(None, Algorithm.DFLASH, Algorithm.DDTREE), overlap=False):
    """AR (None among `algorithms`), DFLASH and DDTREE at each of `budgets`."""
    out = []
    if None in algorithms:
        out.append(Config(_named("AR", overlap), None, overlap=overlap))
    if Algorithm.DFLASH in algorithms:
        out.append(Config(_named("DFLASH", overlap), Algorithm.DFLASH, overlap=overlap))
    if Algorithm.DDTREE in algorithms:
        out += [Config(_named(f"DDTREE-{b}", overlap), Algorithm.DDTREE, b, overlap=overlap) for b in budgets]
    return out


def parse_config(name):
    """'DDTREE-63-chain16/overlap' -> its Config (ValueError naming the name when it is not one)."""
    m = NAME.match(name)
    if m is None:
        raise ValueError(f"unknown configuration {name!r}: AR, DFLASH, DDTREE-<budget>, "
                         f"DDTREE-<budget>{EAGER_TREE} (its tree built outside the draft graph) or "
                         f"DDTREE-<budget>[{EAGER_TREE}]{CHAIN}<batch> (DFlash's chain verified from that "
                         f"batch size up) or DDTREE-<budget>[{EAGER_TREE}]{ADAPTIVE} (the tree or the chain, "
                         f"whichever the server measures faster at each batch size), each optionally with "
                         f"{OVERLAP} (the overlap scheduler on)")
    overlap = m["overlap"] is not None
    if m["budget"] is None:
        base = split_name(name)[0]
        return Config(name, None if base == "AR" else Algorithm(base), overlap=overlap)
    return Config(name, Algorithm.DDTREE, int(m["budget"]), overlap=overlap, eager_tree=m["eager"] is not None,
                  chain_batch=None if m["chain"] is None else int(m["chain"]), adaptive=m["adaptive"] is not None)


def parse_configs(text):
    """'AR,DFLASH,DDTREE-16/overlap' -> Configs (ValueError naming what is unknown)."""
    return [parse_config(x.strip()) for x in text.split(",") if x.strip()]


def spec_flags(cfg, draft_path):
    """The speculative part of a server's flags, and the scheduler's overlap off unless the configuration has it."""
    f = [] if cfg.overlap else ["--disable-overlap-schedule"]
    if cfg.algorithm:
        f += ["--speculative-algorithm", cfg.algorithm, "--speculative-draft-model-path", str(draft_path)]
    if cfg.algorithm is Algorithm.DDTREE:
        f += ["--speculative-ddtree-budget", str(cfg.budget)]
        if cfg.chain_batch is not None:
            f += ["--speculative-ddtree-chain-batch", str(cfg.chain_batch)]
        if cfg.adaptive:
            f += ["--speculative-ddtree-adaptive"]
    return f


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())


def closed_loop(base, prompts, concurrency, sampling):
    """The prompts through `concurrency` client threads (each sends its next prompt when the
    last is answered); {"wall_s", "requests": [{"prompt", "completion_tokens", "spec_verify_ct",
    "e2e_latency", "prefill_finished_time", "request_received_ts", "request_finished_ts",
    "output_ids"}], "errors"}."""
    lock, nxt = threading.Lock(), [0]
    results, errors = [None] * len(prompts), []

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(prompts):
                return
            try:
                r = post(base + "/generate", {"input_ids": prompts[i], "sampling_params": sampling})
                m = r.get("meta_info", {})
                results[i] = {"prompt": i, "output_ids": r.get("output_ids"),
                              **{k: m.get(k) for k in META_KEYS}}
            except Exception as e:    # noqa: BLE001 - reported with the figures
                errors.append(f"prompt {i}: {type(e).__name__}: {e}"[:300])
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"wall_s": time.perf_counter() - t0, "requests": [r for r in results if r], "errors": errors}


def step_ms(req, speculative):
    """One request's mean decode step (ms) and where its decode time came from, or (None, why)."""
    n = req.get("completion_tokens") or 0
    steps = (req.get("spec_verify_ct") or 0) if speculative else n - 1
    if n < 2 or steps < 1:
        return None, "too short"
    start, end = req.get("prefill_finished_time"), req.get("request_finished_ts")
    if not (start and end):
        return None, "no prefill_finished_time / request_finished_ts (server without --enable-metrics)"
    if end <= start:
        return None, "finished before its prefill's end: the clocks disagree"
    return (end - start) / steps * 1e3, STEP_DEFINITION


def ttft_ms(req):
    """One request's time to its first token (ms): received to prefill finished, or None."""
    start, end = req.get("request_received_ts"), req.get("prefill_finished_time")
    return (end - start) * 1e3 if start and end and end >= start else None


def summarise(cfg, batch, run):
    """The figures of one measurement (closed_loop's result)."""
    reqs = run["requests"]
    toks = sum(r.get("completion_tokens") or 0 for r in reqs)
    steps = [s for s, _ in (step_ms(r, cfg.speculative) for r in reqs) if s is not None]
    ttfts = [t for t in map(ttft_ms, reqs) if t is not None]
    acc = lossless.acceptance(reqs) if cfg.speculative else None
    return {"config": cfg.name, "batch": batch, "requests": len(reqs), "errors": run["errors"][:5],
            "completion_tokens": toks, "tokens_per_s": round(toks / run["wall_s"], 2) if run["wall_s"] else None,
            "wall_s": round(run["wall_s"], 3),
            "accept_length": acc["accept_length"] if acc else (1.0 if not cfg.speculative else None),
            "verify_steps": acc["verify_steps"] if acc else None,
            "step_ms": round(statistics.median(steps), 4) if steps else None, "step_ms_requests": len(steps),
            "ttft_ms": round(statistics.median(ttfts), 3) if ttfts else None,
            "per_request_tokens_per_s": round(statistics.median(
                (r["completion_tokens"] / r["e2e_latency"]) for r in reqs if r.get("e2e_latency")), 2)
            if any(r.get("e2e_latency") for r in reqs) else None}


def medians(rows):
    """One row per (config, batch): each figure's median over the rounds (and the rounds' values)."""
    by = {}
    for r in rows:
        by.setdefault((r["config"], r["batch"]), []).append(r)
    out = []
    for (c, b), rs in by.items():
        m = {"config": c, "batch": b, "rounds": len(rs), "requests": sum(r["requests"] for r in rs),
             "errors": [e for r in rs for e in r["errors"]][:5]}
        for k in ("tokens_per_s", "step_ms", "ttft_ms", "accept_length", "per_request_tokens_per_s"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            m[k] = round(statistics.median(vals), 4) if vals else None
            m[k + "_rounds"] = vals
        out.append(m)
    return out


def ratios(rows):
    """Each row with tokens/s and step time over AR's, and DDTREE's tokens/s over DFLASH's, at its batch."""
    idx = {(r["config"], r["batch"]): r for r in rows}
    out = []
    for r in rows:
        ov = split_name(r["config"])[1]
        ar, df = idx.get((_named("AR", ov), r["batch"])), idx.get((_named("DFLASH", ov), r["batch"]))
        tree = r["config"].startswith("DDTREE")
        r = dict(r)
        r["speedup_vs_ar"] = _ratio(r.get("tokens_per_s"), ar and ar.get("tokens_per_s"))
        r["step_vs_ar"] = _ratio(r.get("step_ms"), ar and ar.get("step_ms"))
        r["vs_dflash"] = _ratio(r.get("tokens_per_s"), df and df.get("tokens_per_s")) if tree else None
        r["step_over_dflash_ms"] = (round(r["step_ms"] - df["step_ms"], 4)
                                    if tree and df and df.get("step_ms") and r.get("step_ms") else None)
        out.append(r)
    return out


def _ratio(a, b):
    return round(a / b, 4) if a is not None and b else None


def table(rows, title):
    """Markdown: one row per (batch, configuration)."""
    out = [f"#### {title}", "",
           "| batch | config | accept length | tokens/s | × AR | × DFLASH | step ms | step / AR | step − DFLASH ms | rounds |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["batch"], _order(r["config"]))):
        f = lambda v, p=2: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))  # noqa: E731
        out.append(f"| {r['batch']} | {r['config']} | {f(r.get('accept_length'), 3)} | {f(r.get('tokens_per_s'), 1)} | "
                   f"{f(r.get('speedup_vs_ar'), 3)} | {f(r.get('vs_dflash'), 3)} | {f(r.get('step_ms'), 3)} | "
                   f"{f(r.get('step_vs_ar'), 3)} | {f(r.get('step_over_dflash_ms'), 3)} | {r.get('rounds')} |")
    return "\n".join(out) + "\n"


def _order(name):
    c = parse_config(name)
    if c.algorithm is not Algorithm.DDTREE:
        return (c.overlap, 0 if c.algorithm is None else 1, 0, False, 0, False)
    return (c.overlap, 2, c.budget, c.eager_tree, c.chain_batch or 0, c.adaptive)


@dataclass(frozen=True)
class ChainBatch:
    """What a measured run says --speculative-ddtree-chain-batch should be for one DDTREE
    configuration: per measured batch, its tokens/s and DFLASH's (same scheduling), and the
    smallest measured batch from which DFLASH is at least as fast at every measured batch above
    (None: the tree is faster at the largest one)."""
    config: str
    dflash: str
    batches: tuple            # ((batch, tree tokens/s, DFLASH tokens/s), ...) ascending
    chain_batch: Optional[int]

    @property
    def chain_config(self):
        """The configuration to measure next: this one with the chain batch (None without one)."""
        if self.chain_batch is None:
            return None
        base, ov = split_name(self.config)
        return _named(f"{base}{CHAIN}{self.chain_batch}", ov)


def chain_batch(rows, config):
    """The ChainBatch of DDTREE configuration `config` (no chain batch of its own) from a run's
    summary rows (ValueError naming what is missing)."""
    c = parse_config(config)
    if c.algorithm is not Algorithm.DDTREE or c.chain_batch is not None or c.adaptive:
        raise ValueError(f"{config!r} is not a DDTREE configuration without a chain batch (e.g. DDTREE-63/overlap)")
    dflash = _named("DFLASH", c.overlap)
    tps = {(r["config"], r["batch"]): r.get("tokens_per_s") for r in rows}
    batches = sorted({b for (n, b), v in tps.items() if n == config and v is not None
                      and tps.get((dflash, b)) is not None})
    if not batches:
        have = sorted({n for n, _ in tps})
        raise ValueError(f"no batch with tokens/s of both {config} and {dflash} in the report (it has {have})")
    pairs = tuple((b, tps[(config, b)], tps[(dflash, b)]) for b in batches)
    k = None
    for b, tree, chain in reversed(pairs):
        if chain < tree:
            break
        k = b
    return ChainBatch(config, dflash, pairs, k)


def projection(step_rows, published=PUBLISHED, batch=1):
    """Projected speed-up over AR = acceptance length x (AR step / speculative step), from the
    measured per-step times at `batch` (the 27B shape's: the target's forward dominates there)
    and published acceptance lengths.  A projection: it assumes the measured cost ratio holds on
    the other card and that the drafter reaches the published acceptance."""
    idx = {r["config"]: r for r in step_rows if r["batch"] == batch and r.get("step_ms")}
    out = []
    for p in published:
        for algo in Algorithm:
            tau = p.get(algo)
            if tau is None:
                continue
            for name, r in idx.items():
                ar = idx.get(_named("AR", split_name(name)[1]))       # the AR step of the same scheduling
                if ar and parse_config(name).algorithm is algo:
                    out.append({"source": p["source"], "config": name, "accept_length": tau,
                                "step_ratio": round(r["step_ms"] / ar["step_ms"], 4),
                                "projected_speedup": round(tau * ar["step_ms"] / r["step_ms"], 3),
                                "break_even_accept_length": round(r["step_ms"] / ar["step_ms"], 3)})
    return out


# published acceptance of DFlash's chain (the drafters the pair's tree/chain ratio is applied to)
PUBLISHED_CHAIN = (
    ("DDTree paper, Qwen3-8B, MATH-500", 7.79),
    ("DDTree paper, Qwen3-Coder-30B-A3B, HumanEval", 8.02),
    ("z-lab Qwen3-4B/8B-DFlash-b16 model cards, low end", 6.5),
)


def ratio_projection(pair_rows, big_rows, config, big_ar_rows=None, published=PUBLISHED_CHAIN, batch=1):
    """The large target's speed-up over AR at `batch` with a published DFlash chain acceptance tau and
    the tree's acceptance taken as tau x the pair's measured ratio (config's acceptance over DFLASH's
    of the same scheduling, in pair_rows' medians) instead of a paper's: DFLASH tau x AR step / DFLASH
    step, config tau x ratio x AR step / config step, the steps from big_rows (and, when big_rows has
    no AR of that scheduling, AR / DFLASH from big_ar_rows, joined through the DFLASH of each).
    Returns {"ratio", "rows": [...]}; a projection, not a measurement."""
    def at(rows, name):
        return next((r for r in rows if r["config"] == name and r["batch"] == batch), None)
    _, ov = split_name(config)
    dfl, ar = _named("DFLASH", ov), _named("AR", ov)
    pt, pc = at(pair_rows, config), at(pair_rows, dfl)
    bt, bc = at(big_rows, config), at(big_rows, dfl)
    if not (pt and pc and bt and bc and pt.get("accept_length") and pc.get("accept_length")):
        raise ValueError(f"ratio projection: {config} and {dfl} at batch {batch} are needed in both reports "
                         "(the pair's acceptance, the large target's steps)")
    ba = at(big_rows, ar)
    if ba is None:
        src, sc = (at(big_ar_rows, ar), at(big_ar_rows, dfl)) if big_ar_rows else (None, None)
        if not (src and sc):
            raise ValueError(f"ratio projection: no {ar} step at batch {batch} beside the large target's {dfl} "
                             "(give the report that has both)")
        ar_ms = bc["step_ms"] * src["step_ms"] / sc["step_ms"]
    else:
        ar_ms = ba["step_ms"]
    ratio = pt["accept_length"] / pc["accept_length"]
    rows = []
    for source, tau in published:
        chain = tau * ar_ms / bc["step_ms"]
        tree = tau * ratio * ar_ms / bt["step_ms"]
        rows.append({"source": source, "dflash_accept_length": tau, "tree_accept_length": round(tau * ratio, 3),
                     "dflash_step_over_ar": round(bc["step_ms"] / ar_ms, 4), "tree_step_over_ar": round(bt["step_ms"] / ar_ms, 4),
                     "dflash_speedup": round(chain, 3), "tree_speedup": round(tree, 3), "tree_over_dflash": round(tree / chain, 3)})
    return {"config": config, "batch": batch, "ratio": round(ratio, 4), "ar_step_ms": round(ar_ms, 4), "rows": rows}


def projection_table(rows):
    out = ["| published acceptance (source) | config (measured step) | accept length | step / AR | break-even accept length | **projected × AR** |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['source']} | {r['config']} | {r['accept_length']} | {r['step_ratio']:.3f} | "
                   f"{r['break_even_accept_length']:.3f} | **{r['projected_speedup']:.2f}** (projection) |")
    return "\n".join(out) + "\n"
