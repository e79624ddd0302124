"""The allocation probe's logic (see sitecustomize.py next to it): an import
hook that wraps SGLang's pool constructors and free-memory reading once their
modules have executed, and the records it keeps."""
import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys

TARGETS = {
    "sglang.srt.mem_cache.memory_pool": ("MHATokenToKVPool", "MambaPool"),
    "sglang.srt.utils.common": ("get_available_gpu_memory",),
    "sglang.srt.layers.utils.multi_platform": ("MultiPlatformOp",),
}
POOLS = ("MHATokenToKVPool", "MambaPool")
# SGLO_E2E_PHASES: profiler ranges "sglo:<phase>" around the methods a decode step runs
# (tools/gpu/spec_profile.py reads them from a /start_profile trace); (class or None for a
# module-level function, attribute, phase).  Scheduler.run_batch's range is named after the
# batch's forward mode (sglo:step:DECODE), the unit spec_profile counts.
PHASES = {
    "sglang.srt.managers.scheduler": (("Scheduler", "run_batch", "step"),
                                      ("Scheduler", "process_batch_result", "process_result"),
                                      ("Scheduler", "get_next_batch_to_run", "schedule")),
    "sglang.srt.managers.tp_worker": (("TpModelWorker", "forward_batch_generation", "target_forward"),),
    "sglang.srt.speculative.dflash_worker": (("DFlashWorker", "_run_draft_block", "draft_forward"),
                                             ("DFlashWorker", "_greedy_sample_from_vocab_parallel_head", "draft_sample"),
                                             ("DFlashWorker", "_append_target_hidden_to_draft_kv", "draft_kv_append"),
                                             ("DFlashWorker", "_update_target_mamba_state_after_verify", "mamba_commit")),
    # v0.5.17's spec-v2 DFlash worker (acceptance inline in forward_batch_generation) and the DDTREE on it
    "sglang.srt.speculative.dflash_worker_v2": (("DFlashWorkerV2", "_run_draft_block", "draft_forward"),
                                                ("DFlashWorkerV2", "_greedy_sample_from_vocab_parallel_head", "draft_sample"),
                                                ("DFlashWorkerV2", "_append_target_hidden_to_draft_kv_by_loc",
                                                 "draft_kv_append"),
                                                ("DFlashWorkerV2", "_update_target_mamba_state_after_verify",
                                                 "mamba_commit")),
    "sglang.srt.speculative.dflash_info": (("DFlashVerifyInput", "prepare_for_verify", "verify_prepare"),
                                           ("DFlashVerifyInput", "verify", "accept")),
    "sglang.srt.speculative.ddtree_worker": (("DDTreeWorker", "_draft_topk_logprobs", "draft_topk"),
                                             (None, "build_ddtree", "tree_build"),
                                             (None, "make_verify_input", "tree_verify_input"),
                                             (None, "eagle_sample", "accept"),
                                             (None, "commit_mamba_states_after_verify", "mamba_commit")),
    "sglang.srt.speculative.eagle_info": (("EagleVerifyInput", "prepare_for_verify", "verify_prepare"),
                                          ("EagleVerifyInput", "verify", "accept")),
    "sglang.srt.speculative.eagle_worker": (("EAGLEWorker", "_mamba_verify_update", "mamba_commit"),),
}


def annotated(fn, phase):
    """fn inside torch.profiler.record_function("sglo:<phase>") while a profiler runs (outside
    one, a plain call: the benchmark's timings are not the ranges')."""
    import torch

    @functools.wraps(fn)
    def call(*a, **k):
        if not torch.autograd.profiler._is_profiler_enabled:
            return fn(*a, **k)
        name = phase
        if phase == "step":
            mode = getattr(a[1] if len(a) > 1 else k.get("batch"), "forward_mode", None)
            name = f"step:{getattr(mode, 'name', mode)}"
        with torch.profiler.record_function("sglo:" + name):
            return fn(*a, **k)
    call.__sglo_phase__ = phase
    return call


def annotate_module(module, entries):
    """Wrap each (class, attribute, phase) of `module` that exists (a class's own attribute)."""
    done = []
    for cls_name, attr, phase in entries:
        owner = module if cls_name is None else getattr(module, cls_name, None)
        if owner is None or (cls_name is not None and attr not in vars(owner)):
            continue
        fn = getattr(owner, attr)
        if getattr(fn, "__sglo_phase__", None):
            continue
        setattr(owner, attr, annotated(fn, phase))
        done.append(f"{cls_name or module.__name__}.{attr}")
    return done
GIB = 1 << 30


def tensor_bytes(obj, depth=2, seen=None):
    """Bytes of the tensors `obj` holds: a tensor, or lists/tuples/namedtuples/
    dataclass-like objects of them, `depth` levels down; each storage once."""
    import torch
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = (obj.device.type, obj.untyped_storage().data_ptr())
        if key in seen:
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if depth <= 0:
        return 0
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x, depth - 1, seen) for x in obj)
    if hasattr(obj, "__dict__") and not callable(obj):
        return sum(tensor_bytes(v, depth - 1, seen) for v in vars(obj).values())
    return 0


def pool_record(pool):
    """{attribute path: bytes} of a pool's tensors, one level into its state
    holders (MambaPool.mamba_cache.conv, .temporal, ...)."""
    seen, parts = set(), {}
    for name, value in vars(pool).items():
        inner = vars(value) if hasattr(value, "__dict__") and not callable(value) and not _is_tensor(value) else None
        if inner and any(_is_tensor(v) or isinstance(v, (list, tuple)) for v in inner.values()):
            for sub, v in inner.items():
                b = tensor_bytes(v, 2, seen)
                if b:
                    parts[f"{name}.{sub}"] = b
        else:
            b = tensor_bytes(value, 2, seen)
            if b:
                parts[name] = b
    return parts


def _is_tensor(x):
    import torch
    return isinstance(x, torch.Tensor)


def _is_draft():
    """Whether the model runner on the stack is a draft worker's (None: no runner)."""
    f = sys._getframe(2)
    while f is not None:
        s = f.f_locals.get("self")
        if s is not None and hasattr(s, "is_draft_worker") and type(s).__name__.endswith("ModelRunner"):
            return bool(s.is_draft_worker)
        f = f.f_back
    return None


class Recorder:
    def __init__(self, folder):
        self.path = os.path.join(folder, f"probe.{os.getpid()}.json")
        self.data = {"pid": os.getpid(), "pools": [], "free_readings": []}

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)

    def wrap_pool(self, cls):
        init = cls.__init__
        rec = self

        @functools.wraps(init)
        def __init__(self, *a, **k):
            cuda = _cuda()
            before = cuda.memory_allocated() if cuda else None
            init(self, *a, **k)
            after = cuda.memory_allocated() if cuda else None
            rec.data["pools"].append({"class": type(self).__name__, "wrapped": cls.__name__, "draft": _is_draft(),
                                      "size": getattr(self, "size", None), "page_size": getattr(self, "page_size", None),
                                      "layer_num": getattr(self, "layer_num", None),
                                      "tensor_bytes": pool_record(self),
                                      "allocated_delta": None if before is None else after - before})
            rec.save()
        cls.__init__ = __init__

    def wrap_free(self, module, name):
        fn = getattr(module, name)
        rec = self

        @functools.wraps(fn)
        def reading(*a, **k):
            v = fn(*a, **k)
            caller = sys._getframe(1)
            rec.data["free_readings"].append({"gib": v, "bytes": round(v * GIB), "caller": caller.f_code.co_name,
                                              "line": caller.f_lineno, "draft": _is_draft()})
            rec.save()
            return v
        setattr(module, name, reading)


def native_ops(base):
    """SGLang's custom ops (RMSNorm, SiluAndMul, rotary embedding, ...: MultiPlatformOp) run their
    own `forward_native` (torch) where they have one: the float32 runs of the end-to-end check
    need it, as the sgl_kernel CUDA kernels behind `forward_cuda` dispatch only fp16/bf16."""
    dispatch = base.dispatch_forward

    def dispatch_forward(self):
        if type(self).forward_native is not base.forward_native:
            return self.forward_native
        return dispatch(self)
    base.dispatch_forward = dispatch_forward


def _cuda():
    try:
        import torch
        return torch.cuda if torch.cuda.is_available() else None
    except Exception:    # noqa: BLE001 - the probe never breaks the server
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, recorder):
        self.recorder = recorder

    def find_spec(self, name, path, target=None):
        phases = PHASES.get(name) if os.environ.get("SGLO_E2E_PHASES") else None
        if name not in TARGETS and not phases:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module, rec = spec.loader.exec_module, self.recorder

        def patched(module):
            exec_module(module)
            if phases:
                annotate_module(module, phases)
            for attr in TARGETS.get(name, ()):
                obj = getattr(module, attr, None)
                if attr in POOLS and obj is not None:
                    rec.wrap_pool(obj)
                elif attr == "MultiPlatformOp" and obj is not None:
                    if os.environ.get("SGLO_E2E_NATIVE_OPS"):
                        native_ops(obj)
                elif obj is not None:
                    rec.wrap_free(module, attr)
        spec.loader.exec_module = patched
        return spec


def install(folder):
    os.makedirs(folder, exist_ok=True)
    sys.meta_path.insert(0, _Finder(Recorder(folder)))
