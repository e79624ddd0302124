"""The lossless runs of the end-to-end check (--lossless): lossless speculation, CUDA
graphs on and off, the ledger against the allocator, on small models with real weights
written on the GPU machine (e2e_model_dirs.make_lossless_models, e2e_models).  Which runs,
with which flags and environment (lossless_runs, lossless_flags, lossless_env), their
requests (exercise_lossless), their order under a budget and their resumption
(run_lossless), their judgement against each (model, tree)'s reference (check_lossless;
the comparisons themselves: e2e_lossless) and their table (tests/gpu/test_e2e_lossless.py)."""
import json
import time
from enum import StrEnum

from . import e2e_log
from .e2e_log import Outcome
from .e2e_server import Tree
from . import e2e_server
from . import e2e_model_dirs
from . import e2e_lossless as lossless
from . import e2e_models as models_mod
from . import e2e_pools as pools_mod


class Model(StrEnum):
    """The lossless runs' models (e2e_models: DENSE, HYBRID), with real weights written on the GPU machine."""
    DENSE = "dense"
    HYBRID = "hybrid"


class Send(StrEnum):
    """How a run's prompts are sent: one by one, or as one batch (the keys of a run's outputs)."""
    SINGLE = "single"
    BATCH = "batch"


def run_id(model, tree, spec, graphs, overlap=True, chain=None):
    """A run's id; SGLang's overlap scheduler is on by default, a run without it says so."""
    return (f"{model}.{tree}.{(spec or 'base').lower()}.{'graphs' if graphs else 'eager'}"
            + ("" if overlap else ".no-overlap") + ("" if chain is None else f".chain{chain}"))


def lossless_runs():
    """Every run, in the order they are worth device time (a budget cuts the tail):
    the patched tree first (the product), eager before graphs; the reference of
    each (model, tree) is its non-speculative eager run."""
    R = []

    def add(model, tree, spec, graphs, refusal=None, overlap=True, chain=None):
        R.append({"id": run_id(model, tree, spec, graphs, overlap, chain),
                  "model": model, "tree": tree, "spec": spec, "graphs": graphs, "overlap": overlap,
                  "expect": "refused" if refusal else "ok", "refusal": refusal, "chain": chain})
    for model, specs in ((Model.DENSE, (None, "DFLASH")), (Model.HYBRID, (None, "DFLASH", "DDTREE"))):
        for spec in specs:
            add(model, Tree.PATCHED, spec, False)
    # DDTREE's target verify runs in CUDA graphs captured with its tree input (ddtree-cuda-graph.patch)
    add(Model.HYBRID, Tree.PATCHED, "DDTREE", True)
    add(Model.DENSE, Tree.PATCHED, "DDTREE", False)
    add(Model.DENSE, Tree.PATCHED, "DDTREE", True)
    # the same worker driven synchronously (--disable-overlap-schedule)
    add(Model.HYBRID, Tree.PATCHED, "DDTREE", True, overlap=False)
    add(Model.DENSE, Tree.PATCHED, "DDTREE", True, overlap=False)
    # --speculative-ddtree-chain-batch 2: single requests verify the tree, the batch DFlash's chain
    # (its own backend and verify graphs), the worker switching between them as the batch fills and drains
    add(Model.HYBRID, Tree.PATCHED, "DDTREE", True, chain=2)
    add(Model.DENSE, Tree.PATCHED, "DDTREE", True, chain=2)
    add(Model.DENSE, Tree.PATCHED, "DFLASH", True)
    add(Model.HYBRID, Tree.PATCHED, "DFLASH", True)
    for model in (Model.DENSE, "hybrid"):
        add(model, Tree.PRISTINE, None, False)
        add(model, Tree.PRISTINE, "DFLASH", False)
    for model in (Model.DENSE, "hybrid"):
        add(model, Tree.PATCHED, None, True)
    add(Model.DENSE, Tree.PRISTINE, "DFLASH", True)
    add(Model.HYBRID, Tree.PRISTINE, "DFLASH", True)
    return R


def reference_id(model, tree):
    """The id of a (model, tree)'s reference: its non-speculative eager run."""
    return run_id(model, tree, None, False)


def select_runs(selection, kept=()):
    """The runs a --lossless selection ("all" or comma-separated ids) runs, in lossless_runs' order:
    the ids named, each with its (model, tree)'s reference unless a kept (resumed) run is that
    reference (a run with nothing to compare with cannot pass), and the kept ones. ValueError for an
    id that is not a run, naming the ids there are."""
    every = lossless_runs()
    if selection == "all":
        return every
    asked = [x for x in (s.strip() for s in selection.split(",")) if x]
    known = {r["id"] for r in every}
    unknown = [x for x in asked if x not in known]
    if unknown or not asked:
        raise ValueError(f"--lossless {selection!r}: {', '.join(unknown) or 'no run id'} is not a lossless run; "
                         f"the runs: all, or of {', '.join(r['id'] for r in every)}")
    want = set(asked) | set(kept)
    for r in every:
        if r["id"] in asked and reference_id(r["model"], r["tree"]) not in kept:
            want.add(reference_id(r["model"], r["tree"]))
    return [r for r in every if r["id"] in want]


# greedy sampling is an argmax in either backend; the pytorch one needs no JIT compilation (flashinfer's
# sampling kernels are compiled on first use when the bundle carries no cubins)
PLAN_KEYS = ("id", "model", "tree", "spec", "graphs", "overlap", "chain", "expect", "refusal")
LOSSLESS_COMMON = ["--skip-tokenizer-init", "--attention-backend", "triton", "--disable-piecewise-cuda-graph",
                   "--sampling-backend", "pytorch",
                   "--log-level", "info", "--random-seed", "0", "--mem-fraction-static", "0.25",
                   "--context-length", "4096", "--max-running-requests", "32"]


def lossless_flags(run, models, dtype):
    # graphs for one request, a few, and the whole batch of prompts (fewer captures than the default list)
    f = ["--dtype", dtype] + (["--cuda-graph-bs", "1", "4", "32"] if run["graphs"] else ["--disable-cuda-graph"])
    if Model(run["model"]) is Model.HYBRID:
        f += ["--mm-attention-backend", "triton_attn", "--disable-radix-cache", "--mamba-scheduler-strategy", "no_buffer"]
    if run["spec"]:
        f += ["--speculative-algorithm", run["spec"], "--speculative-draft-model-path", str(models[run["model"] + "-draft"])]
    if run.get("chain") is not None:
        f += ["--speculative-ddtree-chain-batch", str(run["chain"])]
    if not run.get("overlap", True):
        f += ["--disable-overlap-schedule"]
    return f


def lossless_env(dtype):
    """float32: SGLang's custom ops run their torch forward_native (the probe's native_ops; the
    sgl_kernel CUDA kernels dispatch only fp16/bf16); the Mamba conv states are float32
    (SGLANG_MAMBA_CONV_DTYPE, bfloat16 by default whatever --dtype says: the Triton causal conv1d
    kernels do not compile for float32 activations on bfloat16 states); every Triton tl.dot is
    IEEE float32 (TRITON_F32_DEFAULT=ieee, TF32 otherwise: on the H200, triton 3.6, a 64x64 dot's max
    error against float64 is 7.6e-6 with it, 0.024 without; the GDN chunk path's merge dots follow
    it with float32-gdn-chunk.patch). docs/results/gpu.md, "What float32 needed"."""
    if dtype != "float32":
        return {}
    return {"SGLO_E2E_NATIVE_OPS": "1", "SGLANG_MAMBA_CONV_DTYPE": "float32", "TRITON_F32_DEFAULT": "ieee"}


def _generate(base, body):
    return json.loads(e2e_server.post(base + "/generate", body, timeout=300))


def exercise_lossless(base, ps, reference):
    """The prompts singly, then as one batch; a reference also sends the batch with
    top-2 log-probabilities (the margins of a mismatch) and one streaming request."""
    sp = {"temperature": 0, "max_new_tokens": lossless.MAX_NEW, "ignore_eos": True}
    out = {"requests_ok": False}
    try:
        t0 = time.time()
        single = [_generate(base, {"input_ids": p, "sampling_params": sp}) for p in ps]
        out["single_s"] = round(time.time() - t0, 2)
        t0 = time.time()
        batch = _generate(base, {"input_ids": ps, "sampling_params": sp})
        out["batch_s"] = round(time.time() - t0, 2)
        out["single"] = [r["output_ids"] for r in single]
        out["batch"] = [r["output_ids"] for r in batch]
        out["acceptance"] = {"single": lossless.acceptance([r["meta_info"] for r in single]),
                             "batch": lossless.acceptance([r["meta_info"] for r in batch])}
        if reference:
            lp = _generate(base, {"input_ids": ps, "sampling_params": sp, "return_logprob": True, "top_logprobs_num": 2})
            out["logprob_batch"] = [r["output_ids"] for r in lp]
            out["margins"] = [[None if m is None else float(f"{m:.4g}") for m in row]
                              for row in lossless.margins([r["meta_info"] for r in lp])]
        chunks = e2e_server.post(base + "/generate", {"input_ids": ps[3], "sampling_params": sp, "stream": True})
        data = [l[6:] for l in chunks.splitlines() if l.startswith("data: ")]
        out["stream_ok"] = bool(data) and data[-1] == "[DONE]" and \
            json.loads(data[-2]).get("output_ids", [])[-1:] == out["single"][3][-1:]
        out["requests_ok"] = all(len(o) == lossless.MAX_NEW for o in out["single"] + out["batch"]) and out["stream_ok"]
    except Exception as e:    # noqa: BLE001 - reported, not raised
        out["request_error"] = f"{type(e).__name__}: {e}"[:500]
    return out


def check_lossless(runs):
    """Each run against its (model, tree) reference (non-speculative, eager): single and
    batch outputs token for token; references across trees; ledger = allocated bytes."""
    refs = {(r["model"], r["tree"]): r for r in runs if r.get("spec") is None and not r["graphs"] and r.get("single")}
    for r in runs:
        chk, noise = {}, None
        if r.get("resumed") and r.get("check") and r is not refs.get((r["model"], r["tree"])):
            continue
        if r.get("skipped"):
            r["check"] = {"pass": None, "why": [r["skipped"]]}
            continue
        o = e2e_log.outcome(r)
        if r.get("refusal"):     # a deliberate start-up refusal (ValueError naming the flag)
            ok = not r.get("healthy") and any(r["refusal"] in e for e in r["log_figures"]["errors"])
            why = [f"refused at start-up: {r['refusal']!r}" if ok else f"{o}, expected the refusal {r['refusal']!r}"]
        else:
            ok = o is Outcome.OK
            errs = r.get("log_figures", {}).get("errors") or []
            why = [o + (f": {errs[-1][:200]}" if not ok and errs else "")
                   + (f" (float32 exited first: {r['float32_failed'][:120]})" if r.get("float32_failed") else "")]
        ref = refs.get((r["model"], r["tree"]))
        if r.get("single") and ref:
            m = ref.get("margins")
            noise = lossless.reference_noise(ref["single"], ref.get("batch") or ref["single"], m)
            for kind in Send:
                c = lossless.compare(ref["single"], r[kind], m, noise=noise)
                chk[kind] = c
                # the reference's own batch divergence is what defines the noise: reported, not judged
                ok &= c["lossless"] or (r is ref and kind is Send.BATCH)
                near = sum(1 for x in c["mismatches"] if x.get("within_noise"))
                why.append(f"{kind}: {'equal' if c['equal'] else str(len(c['mismatches'])) + ' requests differ'} "
                           f"({c['n']} requests, {c['tokens']} tokens"
                           + (f"; {near} first divergence(s) at a reference margin <= {noise:g}, the same "
                              f"server's own single-vs-batch noise" if near else "") + ")")
            if r is ref and r.get("logprob_batch"):
                c = lossless.compare(ref["single"], r["logprob_batch"], m, noise=noise)
                chk["logprob_batch"] = c
                ok &= c["lossless"]
            other = refs.get((r["model"], Tree.PATCHED))
            pristine_ref = r is ref and other and Tree(r["tree"]) is Tree.PRISTINE
            if pristine_ref and r.get("dtype") != other.get("dtype"):
                # outputs of two dtypes are not a lossless comparison: said, not judged
                why.append(f"pristine reference ({r.get('dtype')}) not compared with the patched one "
                           f"({other.get('dtype')})")
            elif pristine_ref:
                c = lossless.compare(other["single"], r["single"], other.get("margins"))
                chk["pristine_vs_patched"] = c
                ok &= c["equal"]
                why.append(f"pristine reference {'=' if c['equal'] else '!='} patched reference")
        elif r.get("single") and not ref:
            ok = False          # served, but nothing to judge it against: not a pass
            why.append("no reference run to compare with")
        if r.get("healthy") and not r.get("requests_ok"):
            ok = False
            why.append(f"requests failed: {r.get('request_error', 'wrong lengths or stream')}")
        if r.get("pools_vs_ledger") is not None:
            ok &= pools_mod.equal(r["pools_vs_ledger"])
            why.append(pools_mod.summary(r["pools_vs_ledger"]))
        r["check"] = {"pass": bool(ok), "why": why, "compare": chk, "reference_noise": noise}
    return runs


def lossless_table(runs):
    rows = ["| run | dtype | outcome | single | batch | accept length (single / batch) | ledger vs allocated | start s |",
            "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if r.get("skipped"):
            rows.append(f"| {r['id']} | | skipped ({r['skipped']}) | | | | | |")
            continue
        c = r.get("check", {}).get("compare", {})
        cell = {k: ("=" if c[k]["equal"] else f"{len(c[k]['mismatches'])} differ") if k in c else "" for k in Send}
        acc = r.get("acceptance") or {}
        al = " / ".join(str((acc.get(k) or {}).get("accept_length", "-")) for k in Send) if r.get("spec") else ""
        led = ""
        if r.get("pools_vs_ledger") is not None:
            led = "equal" if pools_mod.equal(r["pools_vs_ledger"]) else "DIFFERS"
        o = Outcome.REFUSED if r.get("refusal") and r.get("check", {}).get("pass") else e2e_log.outcome(r)
        rows.append(f"| {r['id']} | {r.get('dtype', '')} | {o} | {cell['single']} | "
                    f"{cell['batch']} | {al} | {led} | {r.get('start_s', '')} |")
    rows.append("")
    for r in runs:
        ch = r.get("check", {})
        verdict = {True: "PASS", False: "FAIL", None: "SKIP"}[ch.get("pass")]
        rows.append(f"- {r['id']}: {verdict}: " + "; ".join(ch.get("why", [])))
        for k, c in ch.get("compare", {}).items():
            for m in c["mismatches"][:3]:
                rows.append(f"  - {k} request {m['request']} position {m.get('position')}: reference {m.get('reference')}, "
                            f"got {m.get('got')}, reference margin {m.get('margin')}")
    return "\n".join(rows) + "\n"


def run_lossless(selection, work, out, budget_s, t0, start_timeout, dtype, port, save=lambda part: None, clock=time.time,
                 weights_device="cuda", resume=None, fallback=True):
    """The lossless runs in order while the budget lasts; save(part) after each run.
    resume: a previous report's "lossless" part: its passed runs are kept as they are (the
    references with their outputs), the rest (skipped or failed) is run and compared with them.
    fallback: a reference that cannot start in float32 is retried in bfloat16 (False: it fails)."""
    models, params = e2e_model_dirs.make_lossless_models(work, out, weights_device)
    ps = lossless.prompts(id_max=models_mod.PROMPT_ID_MAX)
    # kept: passed runs, and references that served (their outputs are what the others are judged against)
    done = {r["id"]: r for r in (resume or {}).get("runs", [])
            if (r.get("check") or {}).get("pass") or (r.get("spec") is None and not r.get("graphs")
                                                       and r.get("single") and r.get("requests_ok"))}
    if resume and resume.get("params", {}).get("sha256") not in (None, params.get("sha256")):
        raise SystemExit("e2e: --resume: the previous call's weights differ from this machine's (sha256 of the "
                         "checkpoints); run everything again without --resume")
    runs = [dict(done[r["id"]], resumed=True) if r["id"] in done else r for r in select_runs(selection, done)]
    # each (model, tree) runs in its reference's dtype: a pristine reference that fell back to bfloat16
    # (pristine v0.5.17's hybrid) leaves the patched runs of the same model in float32
    dtypes = {(r["model"], r["tree"]): dtype for r in lossless_runs()}
    dtypes.update({(r["model"], r["tree"]): r["dtype"] for r in done.values() if r.get("spec") is None and not r["graphs"]})
    took = []
    for r in runs:
        if r.get("resumed"):
            continue
        left = budget_s - (clock() - t0)
        # the first start pays the JIT compilation; later ones are estimated from the others
        need = max(took[1:]) if len(took) > 1 else (took[0] if took else 90)
        if left < need + 15:
            r["skipped"] = f"budget: {left:.0f} s left, a run takes ~{need:.0f} s"
            continue
        port += 1
        started = clock()
        ref = r["spec"] is None and not r["graphs"]
        for attempt in (0, 1):
            r["dtype"] = dtypes[(r["model"], r["tree"])]
            flags = lossless_flags(r, models, r["dtype"])
            r["start_timeout"] = min(start_timeout, max(30, left - 20))
            res = e2e_server.run_server(r["tree"], work, models[r["model"]], flags, out / f"{r['id']}.{r['dtype']}", port,
                             r["start_timeout"], common=LOSSLESS_COMMON,
                             exercise_fn=lambda base: exercise_lossless(base, ps, ref), probe=True,
                             extra_env=lossless_env(r["dtype"]))
            for k in [k for k in r if k not in PLAN_KEYS]:     # nothing of a previous attempt stays
                if k not in ("dtype", "start_timeout", "float32_failed"):
                    del r[k]
            r.update(res)
            # float32 is the honest comparison; if this tree cannot serve the model in float32, say so
            # and fall back to bfloat16 (mismatches then carry their margins)
            # (a server that exited at start-up; a start that timed out is not retried)
            if ref and not r["healthy"] and "exit_code" in r and r["dtype"] == "float32" and attempt == 0 \
                    and fallback:
                r["float32_failed"] = (r["log_figures"]["errors"] or ["no error line"])[-1][:300]
                dtypes[(r["model"], r["tree"])] = "bfloat16"
                port += 1
                continue
            break
        if Tree(r["tree"]) is Tree.PATCHED and r.get("ledger_raw") and r.get("probe"):
            r["pools_vs_ledger"] = pools_mod.compare(r["ledger_raw"], r["probe"]["pools"])
        took.append(clock() - started)
        print(f"[e2e {clock() - t0:6.1f}s] {r['id']} ({r['dtype']}): {e2e_log.outcome(r)} "
              f"{r['log_figures']['errors'][-1:]} start {r.get('start_s')} s", flush=True)
        save({"params": params, "runs": runs})
    # every run keeps its outputs (32 x 32 token ids a kind: ~10 kB), so a record is judged again
    # from what the servers answered, not from the verdict it carries (tests/gpu/test_e2e_lossless.py)
    check_lossless(runs)
    return {"params": params, "prompts": [len(p) for p in ps], "runs": runs}

