"""GPU checks of the DDTree tree logic (torch only; SGLang's kernels are not used).

1. tree attention: for every node, the verify logits of a tiny fp32 transformer
   under the tree mask (flattened FULL_MASK layout, depth positions, cached
   prefix) equal the logits of running that node's ancestor path as a plain
   chain; the root is a control.
2. no host sync: one eager step (top-K, build, verify arrays, accept, commit
   maps) under torch.cuda.set_sync_debug_mode("error").
3. verify cost of the tiny model as the tree grows: N = 16..256, batch 1/8/32.
4. tree build and tree compile (ancestor mask, positions, LCRS) per step,
   eager and as a CUDA graph replay, budgets 16..1024, batch 1/32.

  python -m tools.gpu.ddtree_check --out results.json
"""

import argparse
import json
import statistics
from pathlib import Path

import torch

from .pathload import load

ROOT = Path(__file__).resolve().parents[2]


# the overlay file as SGLang gets it, the test model where its tests keep it (neither is a package)
dd = load(ROOT / "overlay/python/sglang/srt/speculative/ddtree_tree.py", "ddtree_tree")
ToyLM = load(ROOT / "tests/ddtree/toymodel.py", "ddtree_toymodel").ToyLM


def cuda_ms(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def check_tree_attention(dev):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    V, L = 512, 15
    model = ToyLM(V, dim=64, layers=2, heads=4, seed=0, device=dev)
    g = torch.Generator(device="cpu").manual_seed(0)
    out = []
    for B in (16, 64, 256):
        R = 2
        prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (7, 33)]
        logits = (torch.randn(R, L, V, generator=g) * 3).to(dev)
        ids, lp = dd.topk_logprobs(logits, min(B, V))
        t = dd.build_ddtree(ids, lp, B)
        pl = torch.tensor([len(p) - 1 for p in prompts], device=dev)
        roots = torch.tensor([p[-1] for p in prompts], device=dev)
        vi = dd.build_verify_inputs(t, roots, pl, prefix_lens_sum=int(pl.sum()))
        N = B + 1
        worst, worst_root, off = 0.0, 0.0, 0
        for r in range(R):
            p = int(pl[r])
            cache = model.causal(torch.tensor(prompts[r][:-1], device=dev))[2]
            blk = vi.custom_mask[off: off + N * (p + N)].view(N, p + N)
            off += N * (p + N)
            lg, _, _ = model.forward(vi.draft_token.view(R, N)[r], vi.positions.view(R, N)[r], blk, cache)
            par = t.parents[r].tolist()
            tok = vi.draft_token.view(R, N)[r].tolist()
            for v in range(int(t.num_nodes[r]) + 1):
                path, u = [], v
                while u > 0:
                    path.append(tok[u])
                    u = par[u]
                chain = prompts[r] + path[::-1]
                ref = model.causal(torch.tensor(chain, device=dev))[0][-1]
                d = float((lg[v] - ref).abs().max())
                if v == 0:
                    worst_root = max(worst_root, d)
                else:
                    worst = max(worst, d)
        out.append({"budget": B, "nodes_checked": int(t.num_nodes.sum()) + R,
                    "max_abs_diff_nodes": worst, "max_abs_diff_root": worst_root, "pass": worst < 1e-4})
        print("tree attention", out[-1], flush=True)
    return out


def one_step(logits, B, roots, pl, pl_sum, pred):
    ids, lp = dd.topk_logprobs(logits, B)
    t = dd.build_ddtree(ids, lp, B)
    vi = dd.build_verify_inputs(t, roots, pl, prefix_lens_sum=pl_sum)
    acc = dd.accept_greedy(t, pred)
    return t, vi, dd.commit_maps(t, acc)


def check_no_sync(dev):
    R, L, V, B = 32, 15, 151936, 64
    logits = torch.randn(R, L, V, device=dev)
    roots = torch.zeros(R, dtype=torch.long, device=dev)
    pl = torch.full((R,), 100, device=dev)
    pred = torch.randint(0, V, (R, B + 1), device=dev)
    one_step(logits, B, roots, pl, 100 * R, pred)  # warm-up (static index caches)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        one_step(logits, B, roots, pl, 100 * R, pred)
        ok, err = True, ""
    except RuntimeError as e:
        ok, err = False, str(e)[:300]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    print("no host sync in a step:", ok, err, flush=True)
    return {"ok": ok, "error": err}


def verify_cost(dev):
    V, P = 4096, 512
    model = ToyLM(V, dim=256, layers=4, heads=4, seed=1, device=dev)
    res = []
    for R in (1, 8, 32):
        cache = [(torch.randn(R, P, model.H, model.Dh, device=dev), torch.randn(R, P, model.H, model.Dh, device=dev))
                 for _ in model.layers]
        logits = torch.randn(R, 15, V, device=dev)
        for N in (16, 32, 64, 128, 256):
            ids, lp = dd.topk_logprobs(logits, N - 1)
            t = dd.build_ddtree(ids, lp, N - 1)
            anc = dd.ancestor_mask(t)
            mask = torch.cat([torch.ones(R, N, P, dtype=torch.bool, device=dev), anc], 2)
            pos = dd.position_ids(t, torch.full((R,), P, device=dev))
            tok = t.tokens
            ms = cuda_ms(lambda: model.forward(tok, pos, mask, cache))
            res.append({"batch": R, "N": N, "verify_ms": ms})
            print("verify cost", res[-1], flush=True)
    return {"model": "ToyLM V=4096 dim=256 layers=4 heads=4, prefix 512, fp32 eager", "rows": res}


def build_compile_cost(dev):
    V, L = 151936, 15
    res = []
    for R in (1, 32):
        logits = torch.randn(R, L, V, device=dev)
        pl = torch.full((R,), 1000, device=dev)
        roots = torch.zeros(R, dtype=torch.long, device=dev)
        for B in (16, 32, 64, 128, 256, 512, 1024):
            ids, lp = dd.topk_logprobs(logits, B)
            t = dd.build_ddtree(ids, lp, B)
            topk_ms = cuda_ms(lambda: dd.topk_logprobs(logits, B))
            build_ms = cuda_ms(lambda: dd.build_ddtree(ids, lp, B))
            comp = lambda: dd.build_verify_inputs(t, roots, pl, prefix_lens_sum=1000 * R)
            compile_ms = cuda_ms(comp)

            def step():
                i2, l2 = dd.topk_logprobs(logits, B)
                t2 = dd.build_ddtree(i2, l2, B)
                return dd.build_verify_inputs(t2, roots, pl, prefix_lens_sum=1000 * R)

            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            graph_ms = cuda_ms(graph.replay)
            del graph
            res.append({"batch": R, "budget": B, "topk_ms": topk_ms, "build_ms": build_ms,
                        "compile_ms": compile_ms, "step_graph_ms": graph_ms})
            print("build/compile", res[-1], flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    dev = torch.device("cuda")
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    out["tree_attention"] = check_tree_attention(dev)
    out["no_sync"] = check_no_sync(dev)
    out["verify_cost"] = verify_cost(dev)
    out["build_compile"] = build_compile_cost(dev)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
