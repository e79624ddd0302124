"""The planner against reality, on the CPU side, from what a GPU run recorded
(tools.gpu.e2e writes e2e.json and the models' config.json files under
its --out; the planner needs the `[harness]` extra, torch 2.13, which a GPU
machine running SGLang 0.5.12.post1 with torch 2.11 does not have):

  python -m tools.gpu.e2e_plan GPU_OUT [--out DIR] [--patched-tree build/sglang] [--json]

For every start-up of the report: the same model (GPU_OUT/models/NAME), the
same drafter, the same SGLang flags, the GPU by its name and the exact free
bytes the server saw before and after its weights (the patched tree's ledger
`pre_load_free_bytes` / `post_load_free_bytes`; on the pin, the allocation
probe's readings in `init_torch_distributed` and `_profile_available_bytes`,
sglang/srt/model_executor/model_runner*.py), through `sgl_overlay.planner` on
the same tree (the pin: the release; patched: --patched-tree).  Its verdict,
KV tokens, running requests and Mamba slots must equal the start-up's.
Writes plan_vs_gpu.json and .md into --out (default GPU_OUT).  Exit 0 all equal, 1 a difference,
2 bad input.

The extraction and comparison are pure (tests/gpu/test_e2e_plan.py)."""
import argparse
import json
import os
import re
import sys
from pathlib import Path
from unittest import mock

from sgl_overlay.harness import environment, reading_gaps

from .e2e_server import Tree

GIB = 1 << 30
# SGLang flags that name machine-local things or the server's address: not sizing inputs
DROP = {"--model-path": 1, "--port": 1, "--host": 1, "--speculative-draft-model-path": 1}


def runs_of(report):
    """(case id, run) for every start-up in an e2e report."""
    for c in report.get("cases", []):
        for tree, r in c["runs"].items():
            yield f"{c['name']}.{tree}", r
    for r in (report.get("lossless") or {}).get("runs", []):
        if not r.get("skipped"):
            yield r["id"], r


def free_bytes(run):
    """(pre, post, source) exact free bytes before/after the target's weights, or None."""
    fig = (run.get("ledger_raw") or {}).get("figures") or {}
    if fig.get("pre_load_free_bytes") and fig.get("post_load_free_bytes"):
        return fig["pre_load_free_bytes"], fig["post_load_free_bytes"], "ledger"
    # the readings the sizing itself uses: `pre_model_load_memory`, not `before_avail_memory`
    # (on the H200 they differ by 94 MiB), and the sizing's own post-load reading
    pre, post = reading_gaps.sizing_readings((run.get("probe") or {}).get("free_readings", []))
    return (pre, post, "probe") if pre and post else None


def sizing_env(run):
    """The SGLang settings of a start-up's environment (e2e.lossless_env: SGLANG_MAMBA_CONV_DTYPE
    for float32 runs sets the Mamba conv states' dtype, hence their bytes): the planner's
    sizing must run under the same ones."""
    return environment.sglang_settings(run.get("env") or {})


def inputs(run, gpu_out):
    """The planner's inputs for one start-up: model, drafter, SGLang flags (machine paths
    replaced by the recorded config folders under gpu_out/models)."""
    words = run["command"].split()
    words = words[words.index("sglang.launch_server") + 1:] if "sglang.launch_server" in words else words
    argv, model, draft, i = [], None, None, 0
    while i < len(words):
        w = words[i]
        if w in DROP:
            v = words[i + 1]
            if w == "--model-path":
                model = Path(gpu_out) / "models" / Path(v).name
            elif w == "--speculative-draft-model-path":
                draft = Path(gpu_out) / "models" / Path(v).name
            i += 2
            continue
        argv.append(w)
        i += 1
    # without --mem-fraction-static the planner derives SGLang's own value for the card (docs/plan.md);
    # compare() sets it beside the value the start-up logged
    return {"model": model, "draft": draft, "argv": argv}


def card(report):
    """The planner's GPU for the card an e2e.json names ("NVIDIA H100 80GB HBM3" -> H100 80GB), or None."""
    from sgl_overlay.planner import gpus

    name = str(report.get("gpu") or "")
    return next((g.name for g in gpus.GPUS if name and gpus.lookup(name) is g), None)


def real(run):
    """What the start-up decided, from its log and (patched) ledger."""
    f = run.get("log_figures", {})
    mamba = f.get("mamba_cache") or []
    healthy = bool(run.get("healthy"))
    return {"starts": healthy, "kv_tokens": f.get("max_total_num_tokens"),
            "running_requests": f.get("max_running_requests"),
            "mamba_slots": mamba[0].get("max_mamba_cache_size") if mamba else None,
            "case": (run.get("ledger") or {}).get("case"),
            "mem_fraction_static": (f.get("server_args") or {}).get("mem_fraction_static")}


def planned(report):
    """The same fields from a planner report (sgl_overlay.planner.plan)."""
    verdict = report["verdict"]                 # a planner Verdict: starts, or starts over budget
    led = report.get("ledger") or {}
    return {"starts": verdict.starts,
            "kv_tokens": led.get("kv_tokens"), "running_requests": led.get("running_requests"),
            "mamba_slots": led.get("mamba_slots"), "case": report.get("case"), "verdict": verdict.text,
            "mem_fraction_static": (report.get("mem_fraction_static") or {}).get("value")}


def ran_release(report):
    """The SGLang release an e2e.json's run installed: its patched wheel's version without the local
    label (``sglang-0.5.17+overlay.4d28fe6c5f13.slim-cp312-...whl`` -> 0.5.17), or None."""
    m = re.match(r"sglang-([^-+]+)", report.get("patched_wheel") or "")
    return m.group(1) if m else None


def compare(plan_fig, real_fig):
    """Field by field; a field the start-up did not report (it died first) is not compared,
    except `starts`.  `case` only where the start-up's ledger has one."""
    rows = []
    for k in FIELDS:
        r, p = real_fig.get(k), plan_fig.get(k)
        if r is None and k != "starts":
            continue
        equal = r == p if k != "mem_fraction_static" else p is not None and abs(float(r) - float(p)) < 1e-9
        rows.append({"field": k, "gpu": r, "planner": p, "equal": equal})
    return rows


# the fields compared; mem_fraction_static is SGLang's own choice where the flags do not give it
FIELDS = ("starts", "kv_tokens", "running_requests", "mamba_slots", "case", "mem_fraction_static")


def table(results):
    out = ["| start-up | free before / after (B, source) | verdict | starts | KV tokens | requests | Mamba slots | case "
           "| --mem-fraction-static |",
           "|---|---|---|---|---|---|---|---|---|"]
    for x in results:
        if x.get("error"):
            out.append(f"| {x['id']} | | {x['error'][:120]} | | | | | | |")
            continue
        cell = {r["field"]: (f"{r['gpu']}" if r["equal"] else f"**GPU {r['gpu']} / plan {r['planner']}**") for r in x["rows"]}
        out.append(f"| {x['id']} | {x['free'][0]:,} / {x['free'][1]:,} ({x['free'][2]}) | {x['verdict']} | "
                   + " | ".join(cell.get(k, "") for k in FIELDS)
                   + " |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gpu_out", help="the --out folder of a tools.gpu.e2e run (e2e.json, models/)")
    ap.add_argument("--patched-tree", default=None, help="the patched tree the GPU ran (default: build/sglang)")
    ap.add_argument("--release", default=None,
                    help="the release the GPU ran as 'pristine' (default: the one of e2e.json's patched wheel)")
    ap.add_argument("--out", default=None, help="where plan_vs_gpu.json/.md go (default: GPU_OUT)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from sgl_overlay.errors import UsageError
    from sgl_overlay.planner import deployment, plan
    out = Path(args.gpu_out)
    try:
        report = json.loads((out / "e2e.json").read_text())
    except (OSError, ValueError) as e:
        print(f"e2e_plan: cannot read {out / 'e2e.json'}: {e}; give the --out folder of a tools.gpu.e2e run",
              file=sys.stderr)
        return 2
    release = args.release or ran_release(report)
    if release is None:
        print(f"e2e_plan: {out / 'e2e.json'} names no patched wheel, so which release ran is unknown; "
              "give it with --release VERSION", file=sys.stderr)
        return 2
    gpu = card(report)
    results = []
    for rid, run in runs_of(report):
        x = {"id": rid}
        results.append(x)
        fb = free_bytes(run)
        if fb is None:
            x["error"] = "no exact free-memory reading recorded (the start-up died before its weights, or no probe)"
            continue
        inp = inputs(run, out)
        tree = Tree.PATCHED if ".patched" in rid else Tree.PRISTINE
        x["free"] = list(fb)
        if sizing_env(run):
            x["env"] = sizing_env(run)
        try:
            with mock.patch.dict(os.environ, sizing_env(run)):     # the planner's child interpreters inherit it
                dep = deployment(inp["model"], gpu=gpu, argv=inp["argv"], draft=inp["draft"],
                                 tree=args.patched_tree if tree is Tree.PATCHED else None,
                                 release=release if tree is Tree.PRISTINE else None,
                                 free_gib=[fb[0] / GIB, fb[1] / GIB], weights_gib=(fb[0] - fb[1]) / GIB)
                rep = plan(dep, with_suggestions=False, with_sensitivity=False)
        except UsageError as e:
            x["error"] = f"planner: {e}"
            continue
        p = planned(rep)
        x["verdict"] = p["verdict"]
        x["why"] = (rep.get("why") or [])[:3] + ([json.dumps(rep["error"], default=str)[:300]] if rep.get("error") else [])
        x["rows"] = compare(p, real(run))
        x["equal"] = all(r["equal"] for r in x["rows"])
    md = table(results)
    dest = Path(args.out) if args.out else out
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "plan_vs_gpu.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (dest / "plan_vs_gpu.md").write_text(md)
    print(json.dumps(results, indent=1, default=str) if args.json else md)
    return 0 if all(x.get("equal") for x in results) else 1


if __name__ == "__main__":
    sys.exit(main())
