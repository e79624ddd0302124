"""What moves free GPU memory between the sizing's pre-load reading and "Load weight begin", on a
bare GPU with torch alone (no SGLang):

  python -m tools.gpu.pre_gap_check --out DIR [--device 0]

The releases' code between the two readings (v0.5.12.post1, v0.5.13.post1: ``ModelRunner.__init__``
after ``init_torch_distributed``; v0.5.18: after ``distributed/bootstrap.py``'s) runs one CUDA
runtime call for a one-GPU start whose flags leave the optional parts off:
``self.forward_stream = torch.get_device_module(self.device).Stream()``.  In a target worker it
is the process's first ``torch.cuda.Stream()``, which makes PyTorch create its stream pool
(``c10/cuda/CUDAStream.cpp``, ``initDeviceStreamState``: 32 streams for each of min(4, the
device's priority levels) priorities).  A drafter in the same process takes a stream from the
existing pool, and the H200 measured no pre-load gap for drafters (docs/results/regress.md).  No
matmul runs there, so no cuBLAS workspace is allocated; this check measures both anyway.

Each order of steps runs in a fresh child process (the stream pool and the cuBLAS handle are
once per process).  A child first does what SGLang does before its pre-load reading: set the
device, a world-1 ``init_process_group`` (nccl) with a gloo group, a small int32 tensor on the
GPU (``GroupCoordinator``'s ``active_ranks``).  Then, one reading after each step, as
``get_available_gpu_memory`` takes it (``torch.cuda.empty_cache()``, then
``torch.cuda.mem_get_info``), with the caching allocator's reserved bytes:

* ``stream``: the first ``torch.cuda.Stream()``; ``stream_again``: a second one;
* ``matmul``: the first bfloat16 matmul (cuBLAS handle, its workspace through the caching
  allocator); ``matmul_again``: a second one.

Writes DIR/pre_gap_check.json: the device (name, capability, SMs), torch and CUDA versions,
per order the readings and per step the free-memory drop, the reserved change and the part
outside the allocator.  Exit 0: measured; 1: a child failed (its stderr is in the JSON);
2: no CUDA device.  The deltas are pure (tests/gpu/test_pre_gap_check.py)."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ORDERS = {"stream_first": ("stream", "stream_again", "matmul", "matmul_again"),
          "matmul_first": ("matmul", "matmul_again", "stream", "stream_again")}
BASELINE = "baseline"


def deltas(readings):
    """Per step after the first reading: ``free_drop`` (bytes of free memory the step took),
    ``reserved_delta`` (the caching allocator's reserved bytes it added) and
    ``outside_allocator`` (the rest: driver-side memory such as streams, handles, modules).
    ``readings``: [{"step", "free", "reserved"}], in order, the baseline first."""
    out = []
    for before, after in zip(readings, readings[1:]):
        drop = before["free"] - after["free"]
        reserved = after["reserved"] - before["reserved"]
        out.append({"step": after["step"], "free_drop": drop, "reserved_delta": reserved,
                    "outside_allocator": drop - reserved})
    return out


def pool_streams(priority_range):
    """Streams PyTorch creates at its first ``torch.cuda.Stream()`` on a device whose
    ``cudaDeviceGetStreamPriorityRange`` gives (least, greatest): 32 per priority level,
    at most 4 levels (``c10::cuda::max_compile_time_stream_priorities``)."""
    least, greatest = priority_range
    return 32 * min(4, least - greatest + 1)


def _priority_range():
    """(least, greatest) from the CUDA runtime, or None where libcudart cannot be loaded."""
    import ctypes
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        least, greatest = ctypes.c_int(), ctypes.c_int()
        if lib.cudaDeviceGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)) == 0:
            return least.value, greatest.value
    return None


def child(order, device):
    """Run one order in this process; print its readings as JSON."""
    import socket
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(device)

    def reading(step):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(device)
        return {"step": step, "free": free, "reserved": torch.cuda.memory_reserved(device)}

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", world_size=1, rank=0)
    dist.new_group([0], backend="gloo")
    active_ranks = torch.ones(1, dtype=torch.int32, device=f"cuda:{device}")
    keep = [active_ranks]
    readings = [reading(BASELINE)]
    for step in ORDERS[order]:
        if step.startswith("stream"):
            keep.append(torch.cuda.Stream())
        else:
            a = torch.ones(64, 64, dtype=torch.bfloat16, device=f"cuda:{device}")
            keep.append(a @ a)
        readings.append(reading(step))
    props = torch.cuda.get_device_properties(device)
    print(json.dumps({"readings": readings, "device": props.name, "capability": [props.major, props.minor],
                      "sms": props.multi_processor_count, "torch": torch.__version__,
                      "cuda": torch.version.cuda, "priority_range": _priority_range(),
                      "env": {k: os.environ[k] for k in ("CUDA_MODULE_LOADING", "CUBLAS_WORKSPACE_CONFIG",
                                                         "CUBLASLT_WORKSPACE_SIZE",
                                                         "TORCH_CUBLASLT_UNIFIED_WORKSPACE") if k in os.environ}}))
    dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for pre_gap_check.json")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--child", choices=sorted(ORDERS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.device)
        return 0
    if args.out is None:
        ap.error("--out is required")
    import torch
    if not torch.cuda.is_available():
        print("pre_gap_check: no CUDA device; run it on the GPU machine", file=sys.stderr)
        return 2
    result, rc = {"orders": {}}, 0
    for order in ORDERS:
        print(f"pre_gap_check: order {order} ...", file=sys.stderr, flush=True)
        p = subprocess.run([sys.executable, __file__, "--child", order, "--device", str(args.device)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            result["orders"][order] = {"failed": p.returncode, "stderr": p.stderr[-4000:]}
            rc = 1
            continue
        run = json.loads(p.stdout.strip().splitlines()[-1])
        for key in ("device", "capability", "sms", "torch", "cuda", "priority_range", "env"):
            result[key] = run.pop(key)
        run["deltas"] = deltas(run["readings"])
        result["orders"][order] = run
    if result.get("priority_range"):
        result["pool_streams"] = pool_streams(result["priority_range"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pre_gap_check.json").write_text(json.dumps(result, indent=1))
    for order, run in result["orders"].items():
        for d in run.get("deltas", []):
            print(f"{order:13s} {d['step']:13s} free -{d['free_drop']:>12,d} B  reserved +{d['reserved_delta']:>12,d} B  "
                  f"outside the allocator {d['outside_allocator']:>12,d} B")
    return rc


if __name__ == "__main__":
    sys.exit(main())
