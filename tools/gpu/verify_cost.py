"""The target model's verify-shaped forward time against verify tokens per
request, on a real SGLang model runner (issue 16's verify cost curve):

  PYTHONPATH=TREE:DEPS python -m tools.gpu.verify_cost --out DIR \\
      [--batches 1,8,32] [--tokens 1,16,32,64,128,256] [--context 512] [--repeat 10] \\
      -- --model-path MODEL --load-format dummy --attention-backend triton ...

SGLang's own benchmark entry (`sglang.bench_one_batch` at v0.5.12.post1:
`load_model` builds the `ModelRunner` from the server arguments,
`prepare_synthetic_inputs_for_latency_test` the requests, `extend` the
batch) builds the runner once; for each batch size B and verify width N:
B requests of `--context` prompt tokens are prefilled, then the same
requests are extended by N tokens on top of that context (an EXTEND
forward over B x N new tokens attending to context + N: the shape of a
chain verify; DDTree's tree verify adds only its attention mask), and only
`model_runner.forward` of that extension is timed with CUDA events,
`--repeat` times (first run discarded as warm-up), median reported.
What it is not: the Gated DeltaNet layers of a hybrid run their extend
(chunked) kernel here, not the verify kernel that also stores per-token
intermediate states (timed separately by tools/gpu/ddtree_check.py).

Writes DIR/verify_cost.json and DIR/verify_cost.md.  The grid, the medians
and the table are pure (tests/gpu/test_verify_cost.py)."""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def grid(batches, tokens, context, max_tokens):
    """(B, N) pairs, in order, with those whose B x (context + N) exceed the KV pool skipped."""
    keep, skip = [], []
    for b in batches:
        for n in tokens:
            (keep if b * (context + n) <= max_tokens else skip).append((b, n))
    return keep, skip


def summary(times_ms):
    """Median of the timed runs (the first is a warm-up and is dropped)."""
    t = times_ms[1:] if len(times_ms) > 1 else times_ms
    return {"median_ms": round(statistics.median(t), 4), "min_ms": round(min(t), 4), "runs": len(t)}


def table(rows, batches, tokens):
    """Markdown: one row per N, one column per batch size, median ms (and ms per verify token)."""
    by = {(r["batch"], r["tokens"]): r for r in rows}
    out = ["| verify tokens / request | " + " | ".join(f"batch {b}" for b in batches) + " |",
           "|---|" + "---|" * len(batches)]
    for n in tokens:
        cells = []
        for b in batches:
            r = by.get((b, n))
            cells.append(f"{r['median_ms']:.3f} ms ({r['median_ms'] / (b * n) * 1000:.1f} us/token)" if r else "-")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def measure(server_argv, batches, tokens, context, repeat):
    import numpy as np
    import torch
    from sglang import bench_one_batch as bench
    from sglang.srt.server_args import PortArgs, ServerArgs
    from sglang.srt.entrypoints.engine import _set_envs_and_config

    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    server_args = ServerArgs.from_cli_args(p.parse_args(server_argv))
    _set_envs_and_config(server_args)
    port_args = PortArgs.init_new(server_args)
    bench.initialize_moe_config(server_args)      # as bench_one_batch.latency_test does
    bench.initialize_fp8_gemm_config(server_args)
    bench.initialize_fp4_gemm_config(server_args)
    runner, _ = bench.load_model(server_args, port_args, 0, 0)
    mr = runner.torch_runner
    keep, skip = grid(batches, tokens, context, mr.max_total_num_tokens)
    rng = np.random.default_rng(0)
    rows = []
    for b, n in keep:
        times = []
        for _ in range(repeat + 1):
            runner.clear()
            ctx = rng.integers(100, 10000, (b, context)).tolist()
            reqs = bench.prepare_synthetic_inputs_for_latency_test(b, context, custom_inputs=ctx)
            _, _, batch = bench.extend(reqs, mr)            # the context, prefilled
            # the same requests, N tokens longer, their context as the prefix
            for r, row in zip(reqs, ctx):
                new = rng.integers(100, 10000, n).tolist()
                r.origin_input_ids = row + new
                r.fill_ids = r.origin_input_ids
                r.prefix_indices = mr.req_to_token_pool.req_to_token[r.req_pool_idx, :context].to(torch.int64)
                r.set_extend_input_len(len(r.fill_ids) - len(r.prefix_indices))
                r.kv_committed_len = context      # the slot is reused (ReqToTokenPool.alloc), its KV committed
            fb = _extension(bench, reqs, mr)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            mr.forward(fb)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        rows.append(dict(batch=b, tokens=n, context=context, **summary(times)))
        print(f"[verify_cost] batch {b} N {n}: {rows[-1]['median_ms']:.3f} ms", flush=True)
    return {"rows": rows, "skipped": [{"batch": b, "tokens": n, "why": "B x (context + N) > KV pool"} for b, n in skip],
            "max_total_num_tokens": mr.max_total_num_tokens, "gpu": torch.cuda.get_device_name(0)}


def _extension(bench, reqs, mr):
    """An EXTEND ForwardBatch of the requests' new tokens over their prefixes (bench_one_batch.extend's
    batch construction, without its forward)."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    tree = bench.TreeCacheNamespace(page_size=mr.server_args.page_size, device=mr.device,
                                    token_to_kv_pool_allocator=mr.token_to_kv_pool_allocator)
    batch = ScheduleBatch.init_new(reqs=reqs, req_to_token_pool=mr.req_to_token_pool,
                                   token_to_kv_pool_allocator=mr.token_to_kv_pool_allocator, tree_cache=tree,
                                   model_config=mr.model_config, enable_overlap=False,
                                   spec_algorithm=SpeculativeAlgorithm.NONE)
    batch.prepare_for_extend()
    return ForwardBatch.init_new(batch.get_model_worker_batch(), mr)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    server_argv = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--tokens", default="1,16,32,64,128,256")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args(own)
    if not server_argv:
        ap.error("give the SGLang server flags after `--` (at least --model-path)")
    batches = [int(x) for x in args.batches.split(",")]
    tokens = [int(x) for x in args.tokens.split(",")]
    t0 = time.time()
    res = measure(server_argv, batches, tokens, args.context, args.repeat)
    res.update(server_flags=server_argv, total_s=round(time.time() - t0, 1),
               method="EXTEND of N tokens per request over a prefilled context (bench_one_batch's runner); "
                      "CUDA events around model_runner.forward; median of --repeat runs after one warm-up")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify_cost.json").write_text(json.dumps(res, indent=1) + "\n")
    md = table(res["rows"], batches, tokens)
    (out / "verify_cost.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
