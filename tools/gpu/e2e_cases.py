"""The end-to-end check's cases (--cases): each a model, the GPU's free memory to leave
(a blocker holds the rest), SGLang flags, and what the pristine and patched trees must
show (CASES; the plain run's DEFAULT_CASES).  run_case starts a server per tree, and a
patched refusal once more with its first remedy; check_case judges the runs and table
writes them (tests/gpu/test_e2e_logic.py).

What a case expects holds on any card: a patched refusal states a remedy and the remedy's
re-run starts; a configuration the pin starts, the patched tree starts too (do no harm); the
dense trees' greedy outputs are the same.  Whether a configuration starts at all is the card's:
tools/gpu/e2e_plan.py judges every start-up against the planner at the readings it recorded.
A case that leaves the GPU a given free memory (an incident's) is reproducible only on a card
with that much free: elsewhere it runs on the card's whole memory, its incident expectation
(``pristine_error``) is not judged, and it is reported "not reproducible on this card" with the
figures, never FAIL for that."""
import time

from . import e2e_log
from .e2e_log import Outcome
from .e2e_server import Tree
from . import e2e_server
from . import e2e_pools as pools_mod


BIG = ["--mm-attention-backend", "triton_attn", "--context-length", "32768", "--tp", "1", "--page-size", "1",
       "--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "16"]
# the 27B-shaped model without a drafter and without --context-length (the model's own 262,144)
ROPE_FLAGS = ["--mm-attention-backend", "triton_attn", "--tp", "1", "--page-size", "1", "--disable-radix-cache",
              "--mamba-scheduler-strategy", "no_buffer"]

# the incident's known-good service (scenario dflash-smoke) but its --mem-fraction-static
SMOKE = BIG + ["--disable-radix-cache", "--mamba-scheduler-strategy", "no_buffer", "--max-running-requests", "4",
               "--max-mamba-cache-size", "24"]

CASES = {
    "dense": {"model": "dense", "free_gib": None,
              "flags": ["--mem-fraction-static", "0.5", "--context-length", "4096"],
              "expect": {"pristine": Outcome.OK, "patched": [Outcome.OK], "same_outputs": True}},
    # tools/sgl_overlay/harness/scenarios/zero-requests-dflash.toml (docs/incidents.md)
    "zero-requests-dflash": {"model": "big", "free_gib": 94.24,
                             "flags": BIG + ["--mamba-scheduler-strategy", "extra_buffer", "--max-running-requests", "4",
                                             "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.647166"],
                             # the pin (v0.5.17) fails in its own sizing before the worker's assertion of
                             # v0.5.12.post1 (kv_cache_configurator.py; the harness: tools/regress.py --scenario
                             # zero-requests-dflash on the pristine tree)
                             "expect": {"pristine_error": "Not enough GPU memory for hybrid (mamba/linear-attention) "
                                                         "state cache", "patched": [Outcome.OK, Outcome.REFUSED]}},
    # tools/sgl_overlay/harness/scenarios/dflash-smoke.toml: v0.5.12.post1 started it; from v0.5.14 the drafter's
    # weights are in the sizing's reading (below), so the pin refuses it and the patched pin refuses it with a remedy
    "dflash-smoke": {"model": "big", "free_gib": 94.24, "flags": SMOKE + ["--mem-fraction-static", "0.6856901"],
                     "expect": {"pristine_error": "Loaded weights leave no GPU memory", "patched": [Outcome.OK, Outcome.REFUSED]}},
    # the same flags on a release from v0.5.14 (a pristine bundle: tools/bundle.py --release 0.5.16 --slim-release):
    # from sgl-project/sglang#23862 (v0.5.14) the drafter starts before the KV sizing, so its weights are in the
    # sizing's reading and the release refuses these flags (harness/draft_reading.py, docs/results/regress.md)
    "dflash-smoke-release": {"model": "big", "free_gib": 94.24, "flags": SMOKE + ["--mem-fraction-static", "0.6856901"],
                             "expect": {"pristine_error": "Loaded weights leave no GPU memory"}},
    # ... and starts them with the fraction raised by the drafter's share of the pre-load reading, chosen before
    # the first run from an estimate of its weights (3.32 GiB: 1,782,641,920 bfloat16 parameters of
    # tests/plan/data/qwen3.6-27b-dflash plus make_models' fields; 3.32 / 94.24 rounded up: 0.6857 + 0.0352 ->
    # 0.725); measured there: 3.584 GiB (docs/results/regress.md), which 0.725 still covers
    # (v0.5.16 starts it, docs/results/regress.md); the pin, v0.5.17, refuses it too: from #32184 the Mamba
    # pools' padding slots are charged to a budget that no longer holds them, and its hint ("Raise
    # --mem-fraction-static above 0.580") is already met; the patched pin starts it, over budget if it must
    # (over-budget-start.patch), or refuses it with a remedy that starts
    "dflash-smoke-raised": {"model": "big", "free_gib": 94.24, "flags": SMOKE + ["--mem-fraction-static", "0.725"],
                            "expect": {"pristine_error": "Loaded weights leave no GPU memory",
                                       "patched": [Outcome.OK, Outcome.REFUSED]}},
    # the H200's own figures: all its free memory (no blocker), SGLang's own --mem-fraction-static
    # for the card, 16 running requests (issue 15)
    "h200-16": {"model": "big", "free_gib": None,
                "flags": BIG + ["--disable-radix-cache", "--mamba-scheduler-strategy", "no_buffer",
                                "--max-running-requests", "16"],
                "expect": {"patched": [Outcome.OK, Outcome.REFUSED]}},
    # h200-16's flags with an H100 80GB's memory on a bigger card (issue 40): the free memory an H100's
    # start-up recorded before the weights (82,193,940,480 B) and the --mem-fraction-static SGLang chooses
    # for an H100 80GB (0.7777278906249999: tests/plan/test_default_fraction.py); both trees refuse 16
    # requests, the patched one with a remedy of two flags, which must start
    "h100-16": {"model": "big", "free_gib": 76.549,
                "flags": BIG + ["--disable-radix-cache", "--mamba-scheduler-strategy", "no_buffer",
                                "--max-running-requests", "16", "--mem-fraction-static", "0.7777278906249999"],
                "expect": {"patched": [Outcome.OK, Outcome.REFUSED]}},
    # the RoPE pre-expansion after "Load weight end" (tools/sgl_overlay/harness/child/rope_reserve.py, docs/results/regress.md
    # "Where the logs' readings and the sizing's differ"): at the model's own 262,144-token context the release
    # grows the vision tower's RoPE cache to 262,400 rows and the text one's by 256: predicted 41,943,040 B
    # (40 MiB) between load_model's end reading and the sizing's; at 2,048 tokens nothing grows (0 B)
    "rope-262k": {"model": "big", "free_gib": None,
                  "flags": ROPE_FLAGS + ["--max-running-requests", "16"],
                  "expect": {"patched": [Outcome.OK, Outcome.REFUSED]}},
    "rope-2k": {"model": "big", "free_gib": None,
                "flags": ROPE_FLAGS + ["--max-running-requests", "16", "--context-length", "2048"],
                "expect": {"patched": [Outcome.OK, Outcome.REFUSED]}},
}

# what a plain run checks (issue 15); the rope-* and dflash-smoke-* cases are measurements, run by name
DEFAULT_CASES = ("dense", "zero-requests-dflash", "dflash-smoke", "h200-16")


# A blocker cannot leave more free memory than the card has: a case that asks for this much more
# than the card's free memory at the start is not reproducible there (the CUDA context and the
# blocker's own take about 0.5 GiB).
CONTEXT_GIB = 0.5


def reproducible(case, card_free_gib):
    """(True, None) where the card can leave the case its free memory; else (False, the figures in words)."""
    want = case.get("free_gib")
    if not want or card_free_gib is None or want <= card_free_gib - CONTEXT_GIB:
        return True, None
    return False, (f"not reproducible on this card: the case leaves {want} GiB free, the card had "
                   f"{card_free_gib:.2f} GiB free at the start; run on the card's whole memory instead")


def check_case(case, runs, card_note=None):
    """The case's expectations against its runs: {"pass": bool, "why": [...], "reproducible": bool}.
    ``card_note``: why the case's free memory is not reproducible on this card (reproducible())."""
    why, ok = [], True
    pr, pa = runs.get("pristine"), runs.get("patched")
    want = case.get("expect", {})
    if card_note:
        why.append(card_note)
    elif pr and want.get("pristine_error"):
        hit = any(want["pristine_error"] in e for e in pr["log_figures"]["errors"])
        ok &= hit
        why.append(f"pristine {'shows' if hit else 'does NOT show'} {want['pristine_error']!r}")
    if pr and want.get("pristine") and e2e_log.outcome(pr) is not want["pristine"]:
        ok = False
        why.append(f"pristine {e2e_log.outcome(pr)}, expected {want['pristine']}")
    if pa:
        o = e2e_log.outcome(pa)
        allowed = want.get("patched", [Outcome.OK])
        refused = o is Outcome.REFUSED
        good = o in allowed and (not refused or bool(pa["log_figures"]["remedies"]))
        ok &= good
        why.append(f"patched {o}" + (" with remedy " + ", ".join(e2e_log.remedy_words(r) for r in pa["log_figures"]["remedies"]) if refused else "")
                   + ("" if good else f" (expected {' or '.join(allowed)}{', with a remedy' if refused else ''})"))
        if pr and e2e_log.outcome(pr) is Outcome.OK and o is not Outcome.OK:
            ok = False
            why.append("do no harm: the pin starts it, the patched tree does not")
        rr = runs.get("patched+remedy")
        if rr:
            g = e2e_log.outcome(rr) is Outcome.OK
            ok &= g
            why.append(f"remedy re-run {e2e_log.outcome(rr)}")
        elif refused and pa["log_figures"]["remedies"]:
            ok = False
            why.append("the remedy was not re-run")
    for k in ("pristine", "patched", "patched+remedy"):
        r = runs.get(k)
        if r and r.get("healthy") and not r.get("requests_ok"):
            ok = False
            why.append(f"{k}: requests failed: {r.get('request_error')}")
    for k in ("patched", "patched+remedy"):
        r = runs.get(k)
        # a refused start allocates no pools: its ledger is the refusal's, with nothing to compare
        if r and r.get("healthy") and r.get("pools_vs_ledger") is not None and not pools_mod.equal(r["pools_vs_ledger"]):
            ok = False
            why.append(f"{k}: ledger vs allocated: " + pools_mod.summary(r["pools_vs_ledger"]))
    if pr and pa and pr.get("outputs") and pa.get("outputs") and want.get("same_outputs"):
        same = pr["outputs"] == pa["outputs"]
        ok &= same
        why.append("greedy outputs identical" if same else "greedy outputs DIFFER")
    return {"pass": bool(ok), "why": why, "reproducible": card_note is None}


def verdict_word(check):
    """PASS / FAIL, and "NOT REPRODUCIBLE ON THIS CARD" for a passing case the card could not give its memory."""
    if not check["pass"]:
        return "FAIL"
    return "PASS" if check.get("reproducible", True) else "PASS (NOT REPRODUCIBLE ON THIS CARD)"


def table(report):
    rows = ["| case | tree | outcome | avail before / after load (GiB) | KV tokens | max_running_requests | Mamba slots | requests | note |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c in report["cases"]:
        for tree, r in c["runs"].items():
            f = r["log_figures"]
            mamba = f["mamba_cache"][0].get("max_mamba_cache_size") if f["mamba_cache"] else ""
            kv = "/".join(str(k.get("tokens", "")) for k in f["kv_cache"])
            note = (f["errors"][-1] if f["errors"] and not r.get("healthy") else "")[:90]
            if f["remedies"]:
                note += " remedy: " + ", ".join(e2e_log.remedy_words(x) for x in f["remedies"])
            req = f"{r.get('n_ok', 0)}/{r.get('n_requests', 0)} + stream {'ok' if r.get('stream_ok') else '-'}" if r.get("healthy") else "-"
            rows.append(f"| {c['name']} | {tree} | {e2e_log.outcome(r)} | {f.get('load_begin_avail_gib', '')} / {f.get('load_end_avail_gib', '')} "
                        f"| {kv} | {f.get('max_running_requests', '')} | {mamba} | {req} | {note} |")
    rows.append("")
    for c in report["cases"]:
        rows.append(f"- {c['name']}: {verdict_word(c['check'])}: " + "; ".join(c["check"]["why"]))
    return "\n".join(rows) + "\n"


def with_remedy(flags, rem):
    """flags with each of the remedy's flags set to its value (replaced, or added at the end)."""
    flags = list(flags)
    for x in [rem, *rem.get("also", [])]:
        f = "--" + x["flag"]
        if f in flags:
            flags[flags.index(f) + 1] = x["value"]
        else:
            flags += [f, x["value"]]
    return flags


def start(tree, work, model, flags, prefix, port, start_timeout):
    """One server of a case (with the allocation probe), its ledger against its pools."""
    r = e2e_server.run_server(tree, work, model, flags, prefix, port, start_timeout, probe=True)
    if r.get("ledger_raw") and r.get("probe"):
        r["pools_vs_ledger"] = pools_mod.compare(r["ledger_raw"], r["probe"]["pools"])
    return r


def run_case(name, trees, work, out, models, port, start_timeout, t0, card_free_gib=None):
    """The case's blocker (where the card can leave the case its free memory, reproducible()), a
    server per tree, and a patched refusal that states a remedy started once more with it; (the
    case's report with its check, the last port used)."""
    case = CASES[name]
    fits, card_note = reproducible(case, card_free_gib)
    # the drafter of a DFLASH case: its config.json alone (make_models)
    case_flags = case["flags"] + (["--speculative-draft-model-path", str(models["draft"])]
                                  if "DFLASH" in case["flags"] else [])
    c = {"name": name, "flags": case["flags"], "runs": {}}
    blocker, note = (e2e_server.start_blocker(case["free_gib"]) if case["free_gib"] and fits else (None, card_note))
    c["blocker"] = note
    try:
        for tree in trees:
            port += 1
            r = c["runs"][tree] = start(tree, work, models[case["model"]], case_flags, out / f"{name}.{tree}", port,
                                        start_timeout)
            print(f"[e2e {time.time() - t0:6.1f}s] {name} {tree}: {e2e_log.outcome(r)} {r['log_figures']['errors'][-1:]}",
                  flush=True)
            if Tree(tree) is Tree.PATCHED and e2e_log.outcome(r) is Outcome.REFUSED and r["log_figures"]["remedies"]:
                rem = r["log_figures"]["remedies"][0]
                port += 1
                rr = c["runs"]["patched+remedy"] = start(tree, work, models[case["model"]], with_remedy(case_flags, rem),
                                                         out / f"{name}.patched+remedy", port, start_timeout)
                print(f"[e2e {time.time() - t0:6.1f}s] {name} patched+remedy ({e2e_log.remedy_words(rem)}): "
                      f"{e2e_log.outcome(rr)}", flush=True)
    finally:
        if blocker:
            e2e_server.stop_blocker(blocker)
    c["check"] = check_case(case, c["runs"], card_note)
    return c, port
