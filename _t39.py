import json, sys, os
from pathlib import Path
from tests.ddtree_integration.run import probe
from sgl_overlay import source, lock
import triton; print("triton", triton.__version__, flush=True)
pristine = source.release_tree(lock.load(Path("upstream.lock")).version)
M = "tests.ddtree_integration.float32_probes"
F32 = {"SGLO_E2E_NATIVE_OPS": "1", "SGLANG_MAMBA_CONV_DTYPE": "float32", "TRITON_F32_DEFAULT": "ieee"}
for name, tree in (("pristine", pristine), ("patched", Path("/tmp/f32/sglang"))):
    for dt, env in (("float32", {}), ("float32", F32), ("bfloat16", {})):
        r = probe(tree, "hybrid_kernels", timeout=600, module=M, dtype=dt, env=env)
        if not r.get("ok"): print(name, json.dumps(r)[:3000]); continue
        v = r["value"]
        fails = [(c, k["kernel"], k["error"].splitlines()[0]) for c, x in v["calls"].items() for k in x["kernels"] if not k["ok"]]
        raised = [(c, x["outcome"][:80]) for c, x in v["calls"].items() if x["outcome"] != "returned"]
        dots = {}
        for x in v["calls"].values():
            for k in x["kernels"]:
                for p, n in (k.get("dots") or {}).items(): dots[p] = dots.get(p, 0) + n
        print(name, dt, bool(env), v["conv_state_dtype"], "fails", fails, "raised", raised, "dots", dots, flush=True)
