"""Run as a script (TRITON_INTERPRET=1 on a CPU; compiled on CUDA): the fused verify input
(ddtree_triton.fused_verify_inputs through build_verify_inputs(fused=True)) against the
pure-torch path (fused=False), element for element, on random trees. Prints one JSON line:
{"cases": n, "mismatches": [...], "start_up_check": {budget x depth: None or why}} (test_verify_kernel.py runs it in a subprocess, so that the
interpreter's environment variable does not reach the other tests' Triton)."""
import json
import runpy
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
# by path, without pytest (the GPU machine runs this with its plain python3)
_load = runpy.run_path(str(ROOT / "tools" / "gpu" / "pathload.py"))["load"]
random_logprobs = _load(ROOT / "tests" / "ddtree" / "helpers.py", "ddtree_helpers").random_logprobs


def load_ddtree():
    return _load(ROOT / "overlay/python/sglang/srt/speculative/ddtree_tree.py", "ddtree_tree")

FIELDS = ("draft_token", "positions", "custom_mask", "retrive_index", "retrive_next_token",
          "retrive_next_sibling", "ancestor")


def cases(dd, device):
    """(label, tree, roots, prefix_lens, prefix_lens_sum): budgets 1-63, batches 1-9, prefixes 0-300,
    the sum exact or an upper bound (the worker's host bound), roots a strided column of a block."""
    g = torch.Generator().manual_seed(1234)
    shapes = [(1, 4, 40, 7), (3, 5, 60, 15), (9, 3, 12, 9), (2, 6, 80, 63), (4, 1, 5, 4), (5, 2, 3, 1)]
    for i, (R, L, V, B) in enumerate(shapes):
        ids, lp = random_logprobs(g, R, L, V, min(B, V))
        tree = dd.build_ddtree(ids.to(device), lp.to(device), B)
        block = torch.randint(0, 49152, (R, L + 1), generator=g).to(device)
        pl = torch.randint(0, 300, (R,), generator=g)
        pl[0] = 0 if i % 2 else pl[0]
        bound = int(pl.sum()) + (0 if i % 3 else 17 * R)
        yield f"R{R}-L{L}-B{B}", tree, block[:, 0], pl.to(device), bound


def main():
    dd = load_ddtree()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n, bad = 0, []
    for label, tree, roots, pl, bound in cases(dd, device):
        want = dd.build_verify_inputs(tree, roots, pl, prefix_lens_sum=bound, fused=False)
        got = dd.build_verify_inputs(tree, roots, pl, prefix_lens_sum=bound, fused=True)
        for f in FIELDS:
            a, b = getattr(want, f), getattr(got, f)
            if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                bad.append(f"{label}: {f}")
        n += 1
    check = {f"{b}x{d}": dd.fused_verify_check(device, b, d) for b, d in ((63, 15), (6, 4), (1, 1))}
    print(json.dumps({"cases": n, "device": device, "mismatches": bad, "start_up_check": check}))


if __name__ == "__main__":
    main()
