"""The plan: one deployment (model, GPU, TP, flags, tree) through the harness.

Every number about KV tokens, Mamba slots and running requests comes from one
run of the tree's real sizing code by the regression harness
(``sgl_overlay.harness.run_child``, a fresh interpreter per run).  The
suggestions and the sensitivity figures are further runs of the same code
with one input changed; nothing here re-derives what SGLang computes.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..harness import layout as layout_mod
from ..harness import outcome as outcome_mod
from ..harness.outcome import classify
from ..harness.run import run_child
from . import gpus as gpus_mod
from . import model as model_mod

GIB = 1 << 30
from ..project import ROOT as ROOT_OF_REPO
# The three answers, in the memory topic's words (docs/memory.md, the ledger's
# figures.case: fits / over_budget / cannot_run), and "cannot tell" (untestable).
# An over-budget start reads OVER_BUDGET + " by N GiB taken from the headroom (remedy ...)".
STARTS, OVER_BUDGET, WONT, UNKNOWN = "starts", "starts, over budget", "will not start", "cannot tell"
# Suggestion targets: 2 starts with everything asked, 1 starts short of it (fewer
# requests than asked, a pool shorter than the context) or over budget, 0 will not start.
FULL, STARTED = 2, 1

# How many sizing runs may be in flight at once (each is one interpreter).
_SLOTS = threading.BoundedSemaphore(max(1, int(os.environ.get("SGLO_PLAN_JOBS", os.cpu_count() or 1))))


# ------------------------------------------------------------------ inputs


@dataclass
class Memory:
    pre_free_gib: float  # free per GPU before the weights load ("Load weight begin. avail mem")
    post_free_gib: float  # free per GPU after ("Load weight end ... avail mem")
    weights_gib: float  # per rank
    source: str  # "given" | "estimated"
    notes: list[str] = field(default_factory=list)


@dataclass
class Tree:
    root: Path
    label: str  # release version, or what the tree was built from, or the path
    era: str
    warning: str | None = None  # e.g. the default tree is older than the patch series


@dataclass
class Deployment:
    tree: Tree
    model: model_mod.ModelInput
    draft: dict | None
    gpu: gpus_mod.Gpu | None
    memory: Memory
    argv: list[str]  # SGLang flags as given
    fields: dict  # ServerArgs fields they set (parsed by the release's own ServerArgs)
    dropped: list[str] = field(default_factory=list)

    @property
    def tp(self) -> int:
        return int(self.fields.get("tp_size") or 1)

    def context_len(self, overrides: dict | None = None) -> int:
        o = overrides or {}
        return int(o.get("context_length") or self.fields.get("context_length") or self.model.context_len())

    def request(self, overrides: dict | None = None, memory: Memory | None = None) -> dict:
        """The harness request (the same plain data a scenario file gives)."""
        m = memory or self.memory
        server = {"tp_size": self.tp, "page_size": 1, "kv_cache_dtype": "auto"}
        server.update(self.fields)
        server.update(overrides or {})
        if "mamba_radix_cache_strategy" in server:  # v0.5.16+ field name of --mamba-scheduler-strategy
            server.setdefault("mamba_scheduler_strategy", server["mamba_radix_cache_strategy"])
        if server.get("speculative_algorithm") and self.draft and not server.get("speculative_draft_model_path"):
            server["speculative_draft_model_path"] = self.draft["path"]
        return {
            "name": "plan",
            "gpu": {"pre_load_free_gib": m.pre_free_gib, "post_load_free_gib": m.post_free_gib,
                    "weights_gib": m.weights_gib, "world_size": self.tp},
            "model": self.model.harness_model(self.context_len(overrides)),
            "server": server,
            "draft": self.draft,
        }


def resolve_tree(tree: str | None, release: str | None, default: Path) -> Tree:
    if tree and release:
        raise UsageError("give --tree or --release, not both", hint="--tree PATH plans a source tree; "
                         "--release X plans a published release")
    if release:
        from .. import source

        root = layout_mod.source_root(source.release_tree(release))
        return Tree(root, release, layout_mod.detect(root).era)
    path = Path(tree) if tree else default
    if not tree and not (path / "python" / "sglang" / "srt").is_dir():
        raise UsageError(
            f"no patched SGLang tree at {path} (the planner's default tree)",
            hint="build it with `python tools/apply.py` (writes build/sglang), or plan another tree with "
                 "--tree PATH or a published release with --release VERSION")
    try:
        root = layout_mod.source_root(path)
        era = layout_mod.detect(root).era
    except layout_mod.NoSource as e:
        raise UsageError(str(e), hint="pass --tree with an SGLang checkout, build/sglang or an unpacked wheel") from None
    return Tree(root, _label(path, root), era, _staleness(path) if not tree else None)


def _label(path: Path, root: Path) -> str:
    """A release's version, or for a tree tools/apply.py built: what it was built from."""
    from .. import builder

    man = builder.read_manifest(path)
    if man:
        lock = man.get("lock") or {}
        return (f"{lock.get('version')} + {len(man.get('patches') or [])} patches "
                f"(patched tree {path}, stack {str(man.get('stack_digest'))[:12]})")
    return layout_mod.version_of(root) or str(path)


def _staleness(path: Path) -> str | None:
    """The default tree against the repository's current series: a warning, or None."""
    from .. import builder, series

    man = builder.read_manifest(path)
    try:
        digest = series.load(ROOT_OF_REPO).digest
    except Exception:  # noqa: BLE001 - a series being edited: no verdict on staleness
        return None
    if man and man.get("stack_digest") != digest:
        return (f"{path} was built from another patch stack than patches/series now holds "
                f"(stack {str(man.get('stack_digest'))[:12]} vs {digest[:12]}); rebuild it with "
                f"`python tools/apply.py` to plan the current patches")
    return None


def parse_flags(tree: Tree, argv: list[str]) -> tuple[dict, list[str]]:
    """SGLang's flags, parsed by that tree's own ServerArgs (see flags.py)."""
    res = run_child(tree.root, {"argv": list(argv)}, module="sgl_overlay.planner.flags")
    if res.get("ok"):
        return res["fields"], res.get("dropped", [])
    if res.get("kind") == "flag":
        hints = "; ".join(res.get("hints") or [])
        raise UsageError(
            f"SGLang {tree.label} rejects the server flags: {res['error']}"
            + (f" ({hints})" if hints else ""),
            hint=f"this release declares {res.get('known_flags')} flags; see `python -m sglang.launch_server "
                 f"--help` for that release, or plan another release with --release")
    err = res.get("error") or res.get("error", {})
    raise UsageError(f"cannot parse flags with SGLang {tree.label}'s own ServerArgs: {err}",
                     hint="the planner parses flags for releases whose server_args.py loads with stand-ins "
                          "(v0.5.5-v0.5.19, patched trees of the pin); plan another release with --release")


def memory_for(mi: model_mod.ModelInput, gpu: gpus_mod.Gpu | None, tp: int, free_gib: list[float] | None,
               overhead_gib: float) -> Memory:
    weights_rank = mi.weights_bytes / GIB / tp
    if free_gib:
        pre = float(free_gib[0])
        if len(free_gib) > 1:
            post = float(free_gib[1])
            return Memory(pre, post, pre - post, "given",
                          [f"free memory given: {pre} GiB before the weights, {post} GiB after "
                           f"(so {pre - post:.2f} GiB of weights per rank)"])
        return Memory(pre, pre - weights_rank, weights_rank, "given",
                      [f"free memory before the weights given: {pre} GiB",
                       f"weights per rank: {mi.weights_source}, divided by TP {tp}"])
    if gpu is None:
        raise UsageError("no GPU and no free-memory figures",
                         hint=f"pass --gpu NAME (one of: {', '.join(gpus_mod.names())}) or --free-gib PRE[,POST]")
    pre = gpu.total_gib - overhead_gib
    return Memory(pre, pre - weights_rank, weights_rank, "estimated", [
        f"total memory of {gpu.name}: {gpu.total_mib:,} MiB = {gpu.total_gib:.2f} GiB ({gpu.source})",
        f"free before the weights: total - {overhead_gib} GiB assumed start-up overhead (CUDA context, NCCL, "
        f"workspaces; the incident measured 1.35 GiB on an RTX PRO 6000 at TP1) = {pre:.2f} GiB",
        f"weights per rank: {mi.weights_source}, divided by TP {tp} = {weights_rank:.2f} GiB "
        f"(assumes an even split; the drafter's weights load after the target's KV sizing and are not counted)",
    ])


# ------------------------------------------------------------------ one run


@dataclass
class Sizing:
    overrides: dict
    outcome: str
    reason: str
    figures: dict
    error: dict | None
    verdict: str
    why: list[str]
    ledger: dict
    case: str | None = None  # the tree's ledger figures.case, where the tree writes one
    shortfall: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int:
        if self.verdict == UNKNOWN:
            return -1
        if self.verdict == WONT:
            return 0
        return FULL if self.verdict == STARTS and not self.shortfall else STARTED

    def to_dict(self) -> dict:
        return {"overrides": self.overrides, "outcome": self.outcome, "reason": self.reason,
                "verdict": self.verdict, "case": self.case, "shortfall": self.shortfall,
                "why": self.why, "ledger": self.ledger,
                "error": {k: (self.error or {}).get(k) for k in ("type", "message", "where")} if self.error else None}


def size(dep: Deployment, overrides: dict | None = None, memory: Memory | None = None) -> Sizing:
    """One run of the tree's real sizing code (one fresh interpreter)."""
    overrides = dict(overrides or {})
    with _SLOTS:
        child = run_child(dep.tree.root, dep.request(overrides, memory))
    c = classify(child)
    figures = child.get("figures", {}) or {}
    m = memory or dep.memory
    ctx = dep.context_len(overrides)
    explicit = (overrides.get("max_running_requests") or dep.fields.get("max_running_requests")) is not None
    tree_ledger = child.get("ledger") or {}
    verdict, why = judge(c["outcome"], c["reason"], figures, ctx, child.get("error"), explicit, tree_ledger)
    short = shortfall(figures, ctx, explicit) if c["outcome"] == "ok" else []
    return Sizing(overrides, c["outcome"], c["reason"], figures, child.get("error"), verdict, why,
                  ledger(figures, m, ctx, overrides.get("mem_fraction_static", dep.fields.get("mem_fraction_static"))),
                  (tree_ledger.get("figures") or {}).get("case"), short)


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
                       "is about an input, the harness may not supply it yet: docs/regress.md, 'Open points')")
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


# ------------------------------------------------------------------ sensitivity


def sensitivity(dep: Deployment, base: Sizing, step_gib: float = 0.1) -> dict:
    """Tokens gained or lost per ``step_gib`` of error, each figure a re-run."""
    m = dep.memory
    shifted = {
        "free_memory_plus": Memory(m.pre_free_gib + step_gib, m.post_free_gib + step_gib, m.weights_gib, m.source),
        "free_memory_minus": Memory(m.pre_free_gib - step_gib, m.post_free_gib - step_gib, m.weights_gib, m.source),
        "weights_plus": Memory(m.pre_free_gib, m.post_free_gib - step_gib, m.weights_gib + step_gib, m.source),
        "weights_minus": Memory(m.pre_free_gib, m.post_free_gib + step_gib, m.weights_gib - step_gib, m.source),
    }
    with cf.ThreadPoolExecutor(4) as ex:
        runs = dict(zip(shifted, ex.map(lambda mm: size(dep, {}, mm), shifted.values())))
    t0 = base.figures.get("max_total_num_tokens")
    out = {"step_gib": step_gib, "base_tokens": t0}
    for k, s in runs.items():
        t = s.figures.get("max_total_num_tokens")
        out[k] = {"tokens": t, "delta_tokens": (t - t0) if isinstance(t, int) and isinstance(t0, int) else None,
                  "running_requests": s.figures.get("max_running_requests"), "verdict": s.verdict, "case": s.case}
    return out


# ------------------------------------------------------------------ suggestions


@dataclass
class Suggestion:
    flag: str
    value: object
    field: str
    sizing: Sizing
    tried: int
    note: str = ""

    def to_dict(self) -> dict:
        return {"flag": self.flag, "value": self.value, "field": self.field, "argv": [self.flag, str(self.value)],
                "verdict": self.sizing.verdict, "case": self.sizing.case, "shortfall": self.sizing.shortfall,
                "why": self.sizing.why, "ledger": self.sizing.ledger,
                "runs": self.tried, "note": self.note, "overrides": self.sizing.overrides}


def _fixes(s: Sizing, target: int) -> bool:
    return s.rank >= target


def _bisect(dep, field_name, lo, hi, target, make, better_high: bool, hint: int | None = None):
    """The smallest change of one flag that fixes the plan, on a grid of indices.

    ``better_high``: raising the value helps, so find the lowest passing index in
    (lo, hi]; otherwise lowering helps, so find the highest passing index in [lo, hi).
    ``make(i)`` maps an index to the flag's value.  Every probe is a sizing run;
    the far end is probed first, so a flag that cannot help costs one run.
    ``hint``: an index to probe first with its neighbour toward the current value
    (a guess from the base run's figures; only runs decide).
    Returns ((value, sizing) or None, runs)."""
    runs = 0
    a, b = lo, hi
    good = good_s = None
    if hint is not None and lo < hint < hi:
        near = hint - 1 if better_high else hint + 1
        s_hint = size(dep, {field_name: make(hint)})
        runs += 1
        if _fixes(s_hint, target):
            good, good_s = hint, s_hint
            a, b = (lo, hint) if better_high else (hint, hi)
            if lo < near < hi:
                s_near = size(dep, {field_name: make(near)})
                runs += 1
                if _fixes(s_near, target):
                    good, good_s = near, s_near
                    a, b = (lo, near) if better_high else (near, hi)
                else:
                    return (make(good), good_s), runs
        else:
            a, b = (hint, hi) if better_high else (lo, hint)
    if good is None:
        far = b if better_high else a
        good_s = size(dep, {field_name: make(far)})
        runs += 1
        if not _fixes(good_s, target):
            return None, runs
        good = far
    while b - a > 1:
        mid = (a + b) // 2
        s = size(dep, {field_name: make(mid)})
        runs += 1
        passed = _fixes(s, target)
        if passed:
            good, good_s = mid, s
        # better_high: passing values lie above a failing one; else below
        if passed == better_high:
            b = mid
        else:
            a = mid
    return (make(good), good_s), runs


KNOBS = ("mem-fraction-static", "max-running-requests", "context-length", "kv-cache-dtype",
         "max-mamba-cache-size", "speculative-budget")


def suggest(dep: Deployment, base: Sizing, knobs=KNOBS) -> tuple[list[Suggestion], list[dict]]:
    """The smallest change of each knob that fixes the plan, each verified by a run.

    The target is "starts"; for a plan that will not start, a knob that cannot get
    there is searched again for the smallest change that makes it start at all
    (degraded; the verdict column says so)."""
    if base.rank in (FULL, -1):
        return [], []
    f = base.figures
    jobs = {}
    mfs = dep.fields.get("mem_fraction_static")
    if "mem-fraction-static" in knobs and isinstance(mfs, (int, float)):
        # a 0.005 grid above the current value, never above 0.95: the headroom has
        # to hold activations and CUDA graphs, which the sizing does not model
        lo = int(mfs * 200)
        hi = 190
        if hi > lo:
            jobs["mem-fraction-static"] = ("mem_fraction_static", lambda target: _bisect(
                dep, "mem_fraction_static", lo, hi, target, lambda i: round(i / 200, 3), True),
                "less headroom for activations and CUDA graphs")
    asked = f.get("max_running_requests_flag")
    if "max-running-requests" in knobs and isinstance(asked, int) and asked > 1:
        jobs["max-running-requests"] = ("max_running_requests", lambda target: _bisect(
            dep, "max_running_requests", 1, asked, target, lambda i: i, False), "")
    ctx = dep.context_len()
    if "context-length" in knobs and ctx > 1024:
        grid = ctx // 1024 if ctx % 1024 == 0 else ctx // 1024 + 1
        tokens = f.get("max_total_num_tokens")
        hint = tokens // 1024 if isinstance(tokens, int) and tokens > 0 else None
        jobs["context-length"] = ("context_length", lambda target: _bisect(
            dep, "context_length", 1, grid, target, lambda i: min(i * 1024, ctx - 1), False, hint), "")
    kv = str(dep.fields.get("kv_cache_dtype") or "auto")
    if "kv-cache-dtype" in knobs and not kv.startswith("fp8"):
        def kv_job(target):
            s = size(dep, {"kv_cache_dtype": "fp8_e4m3"})
            return ((("fp8_e4m3", s) if _fixes(s, target) else None), 1)
        jobs["kv-cache-dtype"] = ("kv_cache_dtype", kv_job, "halves the KV cell; quality depends on the model")
    if "max-mamba-cache-size" in knobs and f.get("mamba_cache_per_req_bytes"):
        reqs = asked if isinstance(asked, int) and asked > 0 else 1
        cur = dep.fields.get("max_mamba_cache_size")

        def mamba_job(target):
            cands = sorted({reqs * k for k in (1, 2, 4, 6)} - {cur},
                           key=lambda v: (abs(v - cur) if isinstance(cur, int) else v))
            runs = 0
            for v in cands:
                s = size(dep, {"max_mamba_cache_size": v})
                runs += 1
                if _fixes(s, target):
                    return (v, s), runs
            return None, runs
        jobs["max-mamba-cache-size"] = ("max_mamba_cache_size", mamba_job,
                                        "candidates: multiples of the running requests asked")
    spec = dep.fields.get("speculative_algorithm")
    ntok = f.get("speculative_num_draft_tokens")
    if "speculative-budget" in knobs and spec and isinstance(ntok, int) and ntok > 1:
        fld = "speculative_dflash_block_size" if str(spec).upper() == "DFLASH" else "speculative_num_draft_tokens"
        note = ("a DFlash drafter is trained for its block size; a smaller verify window may cost acceptance"
                if fld == "speculative_dflash_block_size" else "fewer draft tokens verified per step")
        jobs["speculative-budget"] = (fld, lambda target: _bisect(dep, fld, 1, ntok, target, lambda i: i, False),
                                      note)
    found: list[Suggestion] = []
    tried: list[dict] = []
    with cf.ThreadPoolExecutor(max(1, len(jobs))) as ex:
        futs = {k: ex.submit(_staged, fn, base.verdict) for k, (fld, fn, note) in jobs.items()}
        for k, fut in futs.items():
            fld, _, note = jobs[k]
            res, runs = fut.result()
            if res is None:
                tried.append({"flag": f"--{k}" if k != "speculative-budget" else f"--{fld.replace('_', '-')}",
                              "runs": runs, "found": False,
                              "why": "no value in the searched range makes it start"})
                continue
            value, s = res
            flag = "--" + fld.replace("_", "-")
            found.append(Suggestion(flag, value, fld, s, runs, note))
            tried.append({"flag": flag, "runs": runs, "found": True})
    return found, tried


def tree_remedies(dep: Deployment, base: Sizing) -> list[dict]:
    """The remedies the tree's own refusal message states ("Raise --mem-fraction-static
    above 0.770", the memory patches' "remedy: --flag = value"), each re-run."""
    if base.outcome != "refused" or not base.error:
        return []
    parse = getattr(outcome_mod, "parse_remedies", None)
    remedies = parse(base.error.get("message", "")) if parse else [
        r for r in [outcome_mod.parse_remedy(base.error.get("message", ""))] if r]
    out = []
    for r in remedies:
        s = size(dep, {r.key: r.value})
        out.append({"flag": r.flag, "value": r.value, "field": r.key, "argv": [r.flag, str(r.value)],
                    "stated_as": r.source, "verdict": s.verdict, "case": s.case, "shortfall": s.shortfall,
                    "why": s.why, "ledger": s.ledger, "works": s.rank > base.rank})
    return out


def _staged(fn, base_verdict: str):
    """Search for "starts" with everything asked; for a plan that will not start,
    then for any start."""
    res, runs = fn(FULL)
    if res is None and base_verdict == WONT:
        res, more = fn(STARTED)
        runs += more
    return res, runs


# ------------------------------------------------------------------ the whole plan


def plan(dep: Deployment, with_suggestions=True, with_sensitivity=True, knobs=KNOBS) -> dict:
    base = size(dep)
    out = {
        "tree": {"root": str(dep.tree.root), "release": dep.tree.label, "layout": dep.tree.era,
                 "warning": dep.tree.warning},
        "model": {"config": str(dep.model.path), "architecture": dep.model.architecture,
                  "weights_bytes": dep.model.weights_bytes, "weights_source": dep.model.weights_source},
        "draft": ({k: v for k, v in dep.draft.items() if k != "hf_config"} if dep.draft else None),
        "gpu": ({"name": dep.gpu.name, "total_mib": dep.gpu.total_mib, "source": dep.gpu.source}
                if dep.gpu else None),
        "tp": dep.tp,
        "flags": dep.argv,
        "server_fields": dep.fields,
        "flag_declarations_dropped": dep.dropped,
        "assumptions": list(dep.memory.notes),
        "outcome": base.outcome,
        "verdict": base.verdict,
        "case": base.case,
        "shortfall": base.shortfall,
        "why": base.why,
        "ledger": base.ledger,
        "error": base.to_dict()["error"],
    }
    if with_sensitivity and base.verdict != UNKNOWN:
        out["sensitivity"] = sensitivity(dep, base)
    if base.outcome == "refused":
        out["tree_remedies"] = tree_remedies(dep, base)
    if with_suggestions:
        found, tried = suggest(dep, base, knobs)
        out["suggestions"] = [s.to_dict() for s in found]
        out["suggestions_tried"] = tried
    return out


def exit_code(verdict: str) -> int:
    """0 it starts (within the budget, or over budget with the tree's warning),
    1 it will not start, 125 cannot tell (docs/plan.md)."""
    if verdict == STARTS or verdict.startswith(OVER_BUDGET):
        return 0
    return {WONT: 1, UNKNOWN: 125}[verdict]
