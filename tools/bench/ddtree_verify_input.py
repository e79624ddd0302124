"""Benchmark: a DDTREE step's verify input (tokens, positions, the flat custom mask, the tree-verify
arrays) built by the pure-torch path against the one-kernel path (ddtree_triton.fused_verify_inputs),
on CUDA: host time a call (what a host-bound step pays: launches, no sync), the GPU's time a call
(CUDA events), and the two outputs compared element for element. The tree is the production one
(fused top-K and build over drafter logits of the pair's vocabulary), each request with a committed
prefix of --prefix tokens; both paths alternate within each repetition, so they see the same clocks.

  python tools/bench/ddtree_verify_input.py                       # on a machine with CUDA and triton
  python tools/bench/ddtree_verify_input.py --shapes 1x63,32x63 --reps 30 --json out.json

Exit codes: 0 measured and equal; 1 the two paths differ; 2 bad arguments or no CUDA/triton here.
"""
import argparse
import json
import runpy
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
load = runpy.run_path(str(ROOT / "tools" / "gpu" / "pathload.py"))["load"]
FIELDS = ("draft_token", "positions", "custom_mask", "retrive_index", "retrive_next_token",
          "retrive_next_sibling")


def parse_shapes(text):
    """"1x63,32x15" -> [(1, 63), (32, 15)] (batch x budget)."""
    out = []
    for part in text.split(","):
        try:
            r, b = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--shapes: {part!r} is not BATCHxBUDGET (e.g. 32x63)")
        if r < 1 or b < 1:
            raise argparse.ArgumentTypeError(f"--shapes: {part!r}: batch and budget must be >= 1")
        out.append((r, b))
    return out


def tree_of(dd, R, B, L, V, seed, dev):
    g = torch.Generator(device="cpu").manual_seed(seed)
    logits = (torch.randn(R, L, V, generator=g) * 3).to(dev)
    ids, lp = dd.topk_logprobs(logits, min(B, V), method="triton")
    return dd.build_ddtree(ids, lp, B, method="triton")


def host_and_gpu(fn, calls):
    """(host ms a call: launches only, no sync inside; GPU ms a call: events around the calls)."""
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) * 1e3 / calls
    en.record()
    en.synchronize()
    return host, st.elapsed_time(en) / calls


def measure(dd, R, B, *, L, V, prefix, reps, calls, seed):
    dev = torch.device("cuda")
    tree = tree_of(dd, R, B, L, V, seed, dev)
    block = torch.randint(0, V, (R, L + 1), device=dev)
    roots = block[:, 0]                                   # a column of the draft block, as the worker's
    pl = torch.full((R,), prefix, dtype=torch.int64, device=dev)
    bound = prefix * R
    paths = {"torch": False, "fused": True}
    outs = {name: dd.build_verify_inputs(tree, roots, pl, prefix_lens_sum=bound, fused=f)
            for name, f in paths.items()}                # also the kernels' compile
    differ = [f for f in FIELDS if not torch.equal(getattr(outs["torch"], f), getattr(outs["fused"], f))]
    host = {n: [] for n in paths}
    gpu = {n: [] for n in paths}
    for _ in range(reps):
        for name, f in paths.items():
            h, g = host_and_gpu(lambda: dd.build_verify_inputs(tree, roots, pl, prefix_lens_sum=bound, fused=f), calls)
            host[name].append(h)
            gpu[name].append(g)
    med = {n: (statistics.median(host[n]), statistics.median(gpu[n])) for n in paths}
    return {"batch": R, "budget": B, "prefix": prefix, "equal": not differ, "differ": differ,
            "torch_host_ms": round(med["torch"][0], 4), "fused_host_ms": round(med["fused"][0], 4),
            "host_saved_ms": round(med["torch"][0] - med["fused"][0], 4),
            "host_ratio": round(med["torch"][0] / med["fused"][0], 2),
            "torch_gpu_ms": round(med["torch"][1], 4), "fused_gpu_ms": round(med["fused"][1], 4)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes("1x15,1x63,4x63,16x63,32x63"),
                    help="batch x budget, comma-separated (default 1x15,1x63,4x63,16x63,32x63)")
    ap.add_argument("--depth", type=int, default=15, help="drafted positions a request (block - 1; default 15)")
    ap.add_argument("--vocab", type=int, default=49152, help="drafter vocabulary (default 49152, the pair's)")
    ap.add_argument("--prefix", type=int, default=600, help="committed tokens a request (default 600)")
    ap.add_argument("--reps", type=int, default=20, help="repetitions; medians are reported (default 20)")
    ap.add_argument("--calls", type=int, default=20, help="calls timed together a repetition (default 20)")
    ap.add_argument("--json", type=Path, help="write the rows here as JSON")
    a = ap.parse_args(argv)
    if min(a.depth, a.vocab, a.reps, a.calls) < 1 or a.prefix < 0:
        ap.error("--depth, --vocab, --reps, --calls must be >= 1 and --prefix >= 0")
    if not torch.cuda.is_available():
        print("ddtree_verify_input: no CUDA device here; this benchmark times GPU launches. "
              "Run it on a machine with an NVIDIA GPU (docs/ddtree.md).", file=sys.stderr)
        return 2
    dd = load(ROOT / "overlay/python/sglang/srt/speculative/ddtree_tree.py", "ddtree_tree")
    if dd.triton_kernels() is None:
        print("ddtree_verify_input: triton does not import here; install the [kernels] extra.", file=sys.stderr)
        return 2
    rows = []
    for i, (R, B) in enumerate(a.shapes):
        print(f"ddtree_verify_input: batch {R}, budget {B} ({i + 1}/{len(a.shapes)})", file=sys.stderr, flush=True)
        rows.append(measure(dd, R, B, L=a.depth, V=a.vocab, prefix=a.prefix, reps=a.reps, calls=a.calls, seed=i))
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "rows": rows}
    print("| batch | budget | torch host ms | fused host ms | saved ms | ratio | torch GPU ms | fused GPU ms | equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['budget']} | {r['torch_host_ms']} | {r['fused_host_ms']} | {r['host_saved_ms']} "
              f"| {r['host_ratio']} | {r['torch_gpu_ms']} | {r['fused_gpu_ms']} | {'yes' if r['equal'] else 'NO: ' + ','.join(r['differ'])} |")
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
