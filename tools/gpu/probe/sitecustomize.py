"""The end-to-end check's allocation probe (tools.gpu.e2e puts this folder
on the servers' PYTHONPATH; nothing else uses it, and it does nothing unless
SGLO_E2E_PROBE names a folder).  Python imports `sitecustomize` at start-up
in every process, SGLang's scheduler subprocess included; this one installs
an import hook that, when SGLang's own modules load, wraps:

- `MHATokenToKVPool.__init__` and `MambaPool.__init__`
  (sglang/srt/mem_cache/memory_pool.py): the bytes of every tensor the new
  pool holds (numel x element_size, per attribute, unique storages) and
  `torch.cuda.memory_allocated()` before and after, with whether the model
  runner that builds it is a draft worker;
- `get_available_gpu_memory` (sglang/srt/utils/common.py): every reading,
  as exact bytes (the GiB float times 2**30 is exact), with its caller.

Each process writes SGLO_E2E_PROBE/probe.<pid>.json after every record.
The records' logic is sglo_probe_logic.py (tested on CPU)."""
import os

if os.environ.get("SGLO_E2E_PROBE"):
    import sglo_probe_logic

    sglo_probe_logic.install(os.environ["SGLO_E2E_PROBE"])
