"""Where a release's code creates the process's first CUDA stream, around the sizing's pre-load reading.

The sizing's pre-load reading (``pre_model_load_memory``; ``min_per_gpu_memory`` in older releases) is
taken at the end of ``init_torch_distributed`` (``model_executor/model_runner.py``; from v0.5.16 in
``distributed/bootstrap.py``), after ``initialize_model_parallel``.  The log's "Load weight begin" is read
later, in ``load_model``.  In between, ``ModelRunner.__init__`` creates its forward stream
(``self.forward_stream = torch.get_device_module(self.device).Stream()``).  The first
``torch.cuda.Stream()`` of a process makes PyTorch create its whole stream pool, outside the caching
allocator (``c10/cuda/CUDAStream.cpp``), so at one GPU the pool lies between the two readings.  At TP > 1
``initialize_model_parallel`` has already built PyNCCL's communicator, whose ``__init__``
(``distributed/device_communicators/pynccl.py``) creates a stream for any world larger than one: the pool
is then made before the pre reading, and the forward stream takes one from it.

``read`` answers both from the tree's own files (Python ASTs, no import); ``stream_pool_in_window`` is the
pure decision for a start at a TP size; ``window`` puts it together with the start's RoPE pre-expansion
(``rope_reserve``: the tree's constants, the caller's ``SGLANG_ROPE_CACHE_*`` settings, the model, the
context length and the speculative rows) for ``readings.derive``.  Where a file or a call is not where these releases have it, the
answer is ``InWindow.UNKNOWN`` and the readings model spans both (``readings.derive``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from . import rope_reserve
from ..readings import InWindow, Window

RUNNER = Path("sglang", "srt", "model_executor", "model_runner.py")
BOOTSTRAP = Path("sglang", "srt", "distributed", "bootstrap.py")
PYNCCL = Path("sglang", "srt", "distributed", "device_communicators", "pynccl.py")
PRE_NAMES = ("pre_model_load_memory", "min_per_gpu_memory")


@dataclass(frozen=True)
class StreamFacts:
    """``forward_after_pre``: ModelRunner.__init__ creates its first stream after it calls
    init_torch_distributed (None: not shown); ``pynccl_before_pre``: PyNCCL's communicator creates a
    stream (world > 1) and init_torch_distributed builds the model-parallel groups before its pre reading
    (None: not shown).  ``where``: the files and lines read."""

    forward_after_pre: bool | None
    pynccl_before_pre: bool | None
    where: str


def _calls(node: ast.AST):
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            yield n, (f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None)


def _method(tree: ast.Module, cls: str | None, name: str):
    scopes = [tree] if cls is None else [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    for scope in scopes:
        for n in scope.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
                return n
    return None


def _calls_through(tree: ast.Module, fn: ast.AST, depth: int = 3):
    """(line in ``fn``, name) of every call in ``fn`` and, through the module's own functions it calls
    (``depth`` levels), of theirs, each at the line of ``fn``'s call that leads there."""
    local = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    out, seen = [], set()

    def walk(node, line, left):
        for c, name in _calls(node):
            at = c.lineno if line is None else line
            out.append((at, name))
            if name in local and name not in seen and left:
                seen.add(name)
                walk(local[name], at, left - 1)

    walk(fn, None, depth)
    return out


def _parse(path: Path):
    return ast.parse(path.read_text(encoding="utf-8")) if path.is_file() else None


def _forward_stream(root: Path) -> tuple[bool | None, str]:
    """ModelRunner.__init__: the line of its first ``Stream()`` against its ``init_torch_distributed`` call."""
    tree = _parse(root / RUNNER)
    init = _method(tree, "ModelRunner", "__init__") if tree else None
    if init is None:
        return None, f"{RUNNER}: no ModelRunner.__init__"
    streams = sorted(c.lineno for c, n in _calls(init) if n == "Stream")
    dist = sorted(c.lineno for c, n in _calls(init) if n == "init_torch_distributed")
    if not streams or not dist:
        return None, f"{RUNNER}: ModelRunner.__init__ has no {'Stream()' if not streams else 'init_torch_distributed'} call"
    return streams[0] > dist[0], f"{RUNNER}:{streams[0]} Stream() after init_torch_distributed at line {dist[0]}"


def _pre_reading(root: Path) -> tuple[Path, ast.AST] | None:
    """The file and the function that take the pre reading (an assignment of get_available_gpu_memory to
    one of ``PRE_NAMES`` in an ``init_torch_distributed``)."""
    for rel, cls in ((BOOTSTRAP, None), (RUNNER, "ModelRunner")):
        tree = _parse(root / rel)
        fn = _method(tree, cls, "init_torch_distributed") if tree else None
        if fn is None:
            continue
        for n in ast.walk(fn):
            if (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in PRE_NAMES for t in n.targets)
                    and any(name == "get_available_gpu_memory" for _, name in _calls(n.value))):
                return rel, fn
    return None


def _pynccl(root: Path) -> tuple[bool | None, str]:
    found = _pre_reading(root)
    if found is None:
        return None, "no init_torch_distributed that reads pre_model_load_memory"
    rel, fn = found
    reading = min(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id in PRE_NAMES for t in n.targets))
    groups = [line for line, name in _calls_through(_parse(root / rel), fn) if name == "initialize_model_parallel"]
    tree = _parse(root / PYNCCL)
    init = _method(tree, "PyNcclCommunicator", "__init__") if tree else None
    streams = sorted(c.lineno for c, name in _calls(init) if name == "Stream") if init else []
    if not groups or not streams:
        return None, f"{rel}: {'no initialize_model_parallel call' if not groups else 'PyNCCL creates no stream'}"
    return min(groups) < reading, (f"{PYNCCL}:{streams[0]} Stream(), built by initialize_model_parallel at "
                                   f"{rel}:{min(groups)}, pre reading at line {reading}")


def read(root: Path) -> StreamFacts:
    """The tree's facts (``root``: the directory holding ``sglang/``)."""
    root = Path(root)
    forward, fwhere = _forward_stream(root)
    pynccl, pwhere = _pynccl(root)
    return StreamFacts(forward, pynccl, f"{fwhere}; {pwhere}")


def stream_pool_in_window(facts: StreamFacts, tp: int) -> InWindow:
    """Whether the stream pool is created between the pre reading and "Load weight begin"."""
    if tp > 1:
        if facts.pynccl_before_pre:
            return InWindow.NO
        return InWindow.YES if facts.forward_after_pre and facts.pynccl_before_pre is False else InWindow.UNKNOWN
    if facts.forward_after_pre is None:
        return InWindow.UNKNOWN
    return InWindow.YES if facts.forward_after_pre else InWindow.NO


def window(root: Path, model: dict, context_len: int, tp: int, spec_steps: int = 0, spec_draft_tokens: int = 0,
           environ=None) -> Window:
    """The release's window for one start (``model``: the scenario's [model] table; the context length and
    the speculative steps and draft tokens as the release resolved them).  RopeInputsError where the model
    lacks what the RoPE caches need."""
    import os

    facts = read(root)
    rel = rope_reserve.with_environment(rope_reserve.release_rope(Path(root)), os.environ if environ is None
                                        else environ)
    rope = rope_reserve.expansion(model, int(context_len), rel, int(spec_steps or 0), int(spec_draft_tokens or 0))
    return Window(stream_pool_in_window(facts, tp), facts.where, rope.lo, rope.hi, rope.words)
