"""End-to-end check on a GPU machine: real SGLang servers, pristine (the
release) against patched (the overlay's wheel), from an offline bundle
(tools/bundle.py; docs/gpu.md).

  python -m tools.gpu.e2e --bundle build/bundle --out DIR [--cases dense,zero-requests-dflash,dflash-smoke,h200-16]

Per case and tree: `python -m sglang.launch_server` with dummy weights and
--skip-tokenizer-init, /health, a batch of /generate requests of varied
lengths (input_ids), one streaming request, clean shutdown (SIGINT); the
start-up log is parsed (avail mem, KV/Mamba allocation, decided counts,
server_args, the error) and, on the patched tree, the memory ledger JSON
(SGLO_MEMORY_LEDGER).  A patched refusal with a `remedy:` line is re-run
once with that remedy.  Writes DIR/e2e.json and DIR/e2e.md (a table).

  python -m tools.gpu.e2e --bundle B --out DIR --cases '' --lossless all --budget-s 480

The lossless runs (e2e_models: small dense and hybrid models with real
weights written here, and DFlash drafters; e2e_lossless: greedy outputs of
DFLASH / DDTREE / CUDA graphs against the same tree's non-speculative
server, token for token, with margins and acceptance; e2e_pools: the patched
ledger's byte figures against the pools' tensors, which the allocation probe
in tools/gpu/probe records inside the server).  Every server runs with the
probe, so its exact free-memory readings are in the report for
tools/gpu/e2e_plan.py (the planner against reality, run on a CPU machine).

Its modules, in the package tools.gpu (standard library only: the GPU machine runs it from a
copy of the tree with its own Python, docs/gpu.md):
e2e_install (the bundle, the stand-ins), e2e_model_dirs (the models' folders),
e2e_server (a server run, the memory blocker), e2e_log (the start-up log and ledger,
the outcome), e2e_cases (the cases, their check and table), e2e_lossless_runs (the
lossless runs, their check and table), and process_groups: every process the check
starts ends with it, whether it ends, is interrupted (SIGINT), terminated (SIGTERM)
or killed.  The parsing, comparison and report functions are pure and tested on CPU
(tests/gpu) against logs recorded on an H200 (tests/gpu/data).
"""
import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from .process_groups import GROUPS
from . import e2e_install
from . import e2e_model_dirs
from . import e2e_cases
from . import e2e_lossless_runs


ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", default=str(ROOT / "build" / "bundle"))
    ap.add_argument("--work", default="/tmp/sglo-e2e")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(e2e_cases.DEFAULT_CASES),
                    help=f"comma-separated, of {', '.join(e2e_cases.CASES)} (default: {', '.join(e2e_cases.DEFAULT_CASES)})")
    ap.add_argument("--trees", default="pristine,patched")
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--lossless", default="", help="'all' or run ids (e2e_lossless_runs.lossless_runs): lossless speculation, "
                    "CUDA graphs on/off, ledger vs allocated bytes, on small models with real weights")
    ap.add_argument("--budget-s", type=float, default=1e9,
                    help="wall-clock budget from the start; lossless runs that would not fit are skipped and reported")
    ap.add_argument("--dtype", default="float32",
                    help="the lossless runs' --dtype (float32, the default: token-for-token comparable; it needs "
                         "the stack's float32 patches and sets lossless_env: docs/results/gpu.md, 'What float32 needed'; "
                         "bfloat16 flips near-ties, judged against the reference's own noise)")
    ap.add_argument("--no-dtype-fallback", action="store_true",
                    help="a reference that exits at start-up in float32 fails instead of being retried in bfloat16")
    ap.add_argument("--weights-device", default="cuda", help="where the lossless models' weights are generated")
    ap.add_argument("--resume", default=None, help="a previous call's e2e.json: its completed lossless runs are kept "
                    "and the others run (several device calls make one report)")
    args = ap.parse_args(argv)
    if args.lossless:       # before anything is installed: a wrong id costs no device time
        try:
            e2e_lossless_runs.select_runs(args.lossless)
        except ValueError as e:
            print(f"e2e: {e}", file=sys.stderr)
            return 2
    with GROUPS.tied():     # SIGINT, SIGTERM and any exit end every server, blocker and helper it started
        return run(args)


def run(args):
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": sys.version.split()[0], "cases": []}
    try:    # (a later call on the same machine may reuse --work without the bundle)
        manifest = json.loads((Path(args.bundle) / "bundle.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    if manifest.get("release") and not manifest.get("patched_wheel") and "patched" in args.trees.split(","):
        raise SystemExit(f"e2e: {args.bundle} is a pristine bundle of sglang {manifest.get('release')} "
                         "(tools/bundle.py --release): it has no patched tree; run it with --trees pristine")
    report["release"] = manifest.get("release")
    if not (work / "pristine" / "sglang").exists():
        shutil.rmtree(work, ignore_errors=True)
        report["install"] = e2e_install.install(args.bundle, work)
    report["install_s"] = round(time.time() - t0, 1)
    report["patched_wheel"] = manifest.get("patched_wheel")  # which stack (its local version names its digest)
    try:
        import torch
        report["torch"] = torch.__version__
        report["gpu"] = torch.cuda.get_device_name(0)
        report["gpu_total_gib"] = round(torch.cuda.mem_get_info()[1] / GIB, 2)
        report["gpu_total_bytes"], report["gpu_free_bytes_at_start"] = torch.cuda.mem_get_info()[1], torch.cuda.mem_get_info()[0]
    except Exception as e:    # noqa: BLE001
        report["torch"] = f"unavailable: {e}"
    models = e2e_model_dirs.make_models(work, ROOT / "tests" / "plan" / "data")
    e2e_model_dirs.record_configs(models, out)
    port = 30123
    for name in [c for c in args.cases.split(",") if c]:
        free = report.get("gpu_free_bytes_at_start")
        c, port = e2e_cases.run_case(name, args.trees.split(","), work, out, models, port, args.start_timeout, t0,
                                     None if free is None else free / GIB)
        report["cases"].append(c)
        (out / "e2e.json").write_text(json.dumps(report, indent=1) + "\n")
    ok = all(c["check"]["pass"] for c in report["cases"])
    md = e2e_cases.table(report) if report["cases"] else ""
    if args.lossless:
        def save(part):
            report["lossless"] = part
            (out / "e2e.json").write_text(json.dumps(report, indent=1) + "\n")
        report["lossless"] = e2e_lossless_runs.run_lossless(
            args.lossless, work, out, args.budget_s, t0, args.start_timeout, args.dtype, port, save,
            weights_device=args.weights_device, fallback=not args.no_dtype_fallback,
            resume=json.loads(Path(args.resume).read_text()).get("lossless") if args.resume else None)
        report["lossless"]["ddtree_pristine"] = "not available: upstream SGLang has no DDTREE algorithm (the ddtree topic adds it)"
        md += "\n" + e2e_lossless_runs.lossless_table(report["lossless"]["runs"])
        ok &= all(r["check"]["pass"] for r in report["lossless"]["runs"])    # a skipped run is not a pass
    report["total_s"] = round(time.time() - t0, 1)
    (out / "e2e.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "e2e.md").write_text(md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
