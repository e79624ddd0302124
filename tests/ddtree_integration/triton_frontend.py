"""Triton's front end for the kernels a real launch would compile, on a CPU.

SGLang's own Python wrappers (the Gated DeltaNet chunk path, the causal
conv1d, ...) are called with CPU tensors of the dtypes a server uses.
Every kernel they launch goes through Triton's own JIT binder (signature,
specialization, constexprs, heuristics, every autotune config), and then,
instead of ``triton.compile``, through the first stage of it only: the
AST -> TTIR code generation (``ASTSource.make_ir``) for an H100/H200
target (``cuda``, capability 90).  That stage is where a kernel written
for 16-bit inputs refuses float32 (``CompilationError``: a cast Triton
rejects, if/else branches of different types) and where each ``tl.dot``
gets its input precision.  Nothing is launched: the compiled "kernel" is
a no-op, so the wrappers run to their end on empty CPU tensors.

Only what the wrappers ask of a GPU is stood in: Triton's active driver
(target, device, stream; an autotune "benchmark" that runs each config
once, so that every config is compiled) and ``torch.cuda``'s device
queries (name, capability: an H200's).  Run it in a child interpreter
(tests/ddtree_integration/child.py): ``activate`` changes both for the
whole process.
"""

from __future__ import annotations

import contextlib
import re

TARGET = ("cuda", 90, 32)
DEVICE_NAME = "NVIDIA H200"
# triton.runtime.driver.active.utils.get_device_properties for an H200
DEVICE_PROPERTIES = {"multiprocessor_count": 132, "max_shared_mem": 232448, "max_num_regs": 65536, "warpSize": 32}

RECORDS: list[dict] = []

_DOT = re.compile(r"tt\.dot .*?inputPrecision = (\w+)")
_DOT_PLAIN = re.compile(r"= tt\.dot ")


class _Utils:
    def get_device_properties(self, device=0):
        return dict(DEVICE_PROPERTIES)


class _Driver:
    """What Triton's JIT and autotuner ask of the active driver."""

    utils = _Utils()

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(*TARGET)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_benchmarker(self):
        def bench(kernel_call, quantiles=None, **kwargs):
            kernel_call()  # compiles this config
            return [1.0, 1.0, 1.0] if quantiles else 1.0

        return bench


class _NoLaunch:
    """The "compiled kernel": launching it does nothing."""

    function = None
    packed_metadata = None

    def launch_metadata(self, *args):
        return None

    def run(self, *args, **kwargs):
        return None


def dots(ttir: str) -> dict:
    """{input precision: count} of the ``tt.dot`` operations in a TTIR text
    (the attribute is printed only when it is not IEEE, its default)."""
    out: dict = {}
    for line in ttir.splitlines():
        if _DOT_PLAIN.search(line):
            m = _DOT.search(line)
            key = m.group(1) if m else "ieee"
            out[key] = out.get(key, 0) + 1
    return out


def strip_locations(ttir: str) -> str:
    """The TTIR without source locations (file paths and line numbers differ
    between two trees even where the kernel does not)."""
    text = re.sub(r"\s*loc\([^()]*(\([^()]*\))?[^()]*\)", "", ttir)
    return "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))


def front_end(src, target=None, options=None, _env_vars=None):
    """Stands in for ``triton.compile``: code generation to TTIR only, the
    outcome recorded in ``RECORDS``."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    opts = backend.parse_options(dict(options or {}))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    record = {"kernel": src.fn.__name__, "module": src.fn.module}
    try:
        module = src.make_ir(target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), context)
    except Exception as e:  # noqa: BLE001 - the compiler's refusal is the result
        record.update(ok=False, error=f"{type(e).__name__}: {e}")
    else:
        ttir = str(module)
        record.update(ok=True, dots=dots(ttir), ttir=strip_locations(ttir))
    RECORDS.append(record)
    return _NoLaunch()


def activate() -> None:
    """Route every Triton launch in this process through ``front_end``, on
    an H200 as the wrappers see it."""
    import torch
    import triton
    import triton.compiler

    triton.runtime.driver.set_active(_Driver())
    triton.compiler.compile = front_end  # JITFunction.create_binder takes it from here
    torch.cuda.get_device_name = lambda *a, **k: DEVICE_NAME
    torch.cuda.get_device_capability = lambda *a, **k: (TARGET[1] // 10, TARGET[1] % 10)
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.device = lambda *a, **k: contextlib.nullcontext()
