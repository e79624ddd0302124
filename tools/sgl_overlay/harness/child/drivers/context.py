"""The context of one run: the tree, the finder that loads its real modules,
the GPU stand-ins, and the records (figures, notes, upstream's reads).  Built
completely by the constructor; the run's inputs are computed from it by
``inputs.runner_inputs``.

The constructor installs the run's import environment, one named step each
(``standins.transformers_standin``, ``standins.triton_standin``,
``loader.installed`` with the scenario's GPU answers: ``setup.import_environment``), and ``close`` undoes
them.  The child interpreter, which runs one scenario and exits, is the
isolation boundary between runs; it closes its context when the result is
complete, so that nothing is left to the interpreter's exit.  What the tree's
own code changes when it is imported is the release's, not undone here (every
release's ``sglang/srt/environ.py`` copies each ``SGL_*`` environment variable
to ``SGLANG_*``): only the child's end undoes that."""

from __future__ import annotations

import contextlib
import types
from pathlib import Path

from ... import draft_reading, readings
from .. import loader, release_window, rope_reserve
from ...layout import Layout
from ...model_shape import ModelShape
from ...scenario_tables import DraftTable, GpuTable
from ..setup import arg_group_modules, import_environment
from ..standins import GPU


class Untestable(Exception):
    """The harness cannot drive this tree for this scenario (exit 125)."""


# Real modules of every tree that has them, besides the layout's own.
EXTRA_REAL = (
    "sglang.srt.server_args",  # first: the release's own flag resolution (resolution.py)
    "sglang.srt.model_executor.cuda_graph_config",  # the CudaGraphConfig records its rules fill (v0.5.16+)
    "sglang.srt.configs.linear_attn_model_registry",  # which hybrid models support the Mamba radix cache
    "sglang.srt.environ",
    "sglang.srt.speculative.spec_info",
    "sglang.srt.speculative.spec_registry",
    "sglang.srt.speculative.dflash_utils",
    "sglang.srt.configs.mamba_utils",
    "sglang.srt.configs.qwen3_next",
    "sglang.srt.configs.qwen3_5",
    "sglang.srt.configs.qwen3_vl",  # the vision config Qwen3_5Config builds (read by the resolution's VLM rule)
    "sglang.srt.distributed.utils",
    "sglang.srt.arg_groups.speculative_hook",
    "sglang.srt.speculative.ddtree_algo",  # DDTREE's registration and rules (patched trees)
    "sglang.srt.model_executor.memory_budget",  # the memory patches' module (patched trees)
    "sglang.srt.model_executor.memory_remedy",  # the memory patches' remedy search (patched trees)
)


def module_exists(root: Path, module: str) -> bool:
    """Whether the tree at ``root`` has the module's file (or package)."""
    base = root.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def real_modules(root: Path, layout: Layout) -> list[str]:
    """The modules the finder runs from the tree: the layout's, ``EXTRA_REAL``
    and every module of the release's flag-resolution package (v0.5.13+),
    those the tree has."""
    extra = list(EXTRA_REAL) + arg_group_modules(root)
    return [m for m in list(layout.real) + extra if module_exists(root, m)]


def scenario_fakes(gpu: GPU, request: dict) -> dict:
    """The names every stand-in module (and every real module that took a
    stand-in) answers for the run: the GPU stand-ins' queries, and where the
    planner passes the drafter's own config.json, ``get_config`` (the release's
    ServerArgs rules read it through get_config(--speculative-draft-model-path),
    e.g. DFLASH's block size when --speculative-dflash-block-size is unset)."""
    fakes = dict(gpu.module_fakes())
    draft_hf = (request.get("draft") or {}).get("hf_config")
    if draft_hf is not None:
        fakes["get_config"] = lambda *a, **k: types.SimpleNamespace(**draft_hf)
    return fakes


class Context:
    """Everything one run shares: the tree, the finder, the stand-ins, the records."""

    def __init__(self, root: Path, layout: Layout, request: dict):
        self.root = root
        self.layout = layout
        # the request's tables read once, into their types (scenario_tables, model_shape): every reader
        # of ``req["gpu"]``, ``req["model"]``, ``req["draft"]`` reads their keys as declared there
        draft = request.get("draft")
        self.req = dict(request, gpu=GpuTable(request["gpu"]), model=ModelShape(request["model"]),
                        draft=None if draft is None else DraftTable(draft))
        self.reads: set[str] = set()
        self.figures: dict = {}
        self.notes: list[str] = []
        # The sizing's own ledger where the tree keeps it in memory (the memory
        # topic's v0.5.23 port: KVCacheConfigurator.memory_ledger), as a dict.
        self.ledger: dict | None = None
        gpu: GpuTable = self.req["gpu"]
        server = request["server"]
        tp = int(server.get("tp_size", 1))
        # From v0.5.14 the drafter's weights are on the GPU at the sizing's reading (draft_reading.py).
        self.drafter_reading = draft_reading.decide(
            draft_reading.drafter_loads_before_sizing(root), bool(server.get("speculative_algorithm")),
            self.req["draft"].weights_gib if self.req["draft"] is not None else None)
        lowered = self.drafter_reading["lowered_by_gib"]
        per_rank = gpu.post_load_free_gib_per_rank
        self.gpu = GPU(float(gpu.post_load_free_gib) - lowered, tp if gpu.world_size is None else gpu.world_size, tp,
                       per_rank=[float(x) - lowered for x in per_rank] if per_rank else None)
        if self.drafter_reading["note"]:
            self.notes.append(self.drafter_reading["note"])
        # the given pre-load reading; for a scenario's "logged" readings take_readings replaces it (and
        # shifts the post-load one) by the sizing's own, once the release has resolved its flags
        self.pre_load = float(gpu.pre_load_free_gib)
        self.readings: dict | None = None
        with contextlib.ExitStack() as installing:  # unwound only when a step fails: nothing is left half done
            env = installing.enter_context(
                import_environment(root, real_modules(root, layout), scenario_fakes(self.gpu, request)))
            self.transformers_standin, self.finder = env.transformers_standin, env.finder
            self._installed = installing.pop_all()

    def take_readings(self, sa) -> None:
        """The sizing's own readings (``readings.derive``), at the request's position along their span
        (``span_at``: 0, the default, the pessimistic end; 1 the optimistic end), from the scenario's and the release's resolved flags (``sa``: the context
        length and the speculative rows its RoPE pre-expansion reads)."""
        gpu: GpuTable = self.req["gpu"]
        server = self.req["server"]
        kind = gpu.readings
        tp = int(server.get("tp_size", 1))
        window = None
        if kind is readings.ReadingKind.LOGGED:
            model = self.req["model"]
            context = getattr(sa, "context_length", None) or model.context_len
            try:
                window = release_window.window(self.root, model, int(context), tp,
                                               getattr(sa, "speculative_num_steps", 0),
                                               getattr(sa, "speculative_num_draft_tokens", 0))
            except rope_reserve.RopeInputsError as e:
                raise Untestable(f"logged readings: the RoPE pre-expansion cannot be derived: {e}") from None
        derived = readings.derive(
            kind, float(gpu.pre_load_free_gib), float(gpu.post_load_free_gib), *gpu.rounding_gib,
            device_name=gpu.device_name, tp=tp, window=window, integrated=gpu.integrated)
        position = float(self.req.get("span_at", readings.End.PESSIMISTIC.position))
        pre, post = derived.at(position)
        self.pre_load = pre
        self.gpu.shift(post - float(gpu.post_load_free_gib))
        self.readings = dict(derived.to_json(), span_at=position, pre_used_gib=pre, post_used_gib=post)

    def close(self) -> None:
        """Undo the constructor's installs: the finder and every ``sglang``
        module, the named fakes, the Triton and transformers stand-ins."""
        self._installed.close()

    def exists(self, module: str) -> bool:
        return module_exists(self.root, module)

    def load(self, module: str):
        mod = loader.load(module)
        self.patch(mod)
        return mod

    def patch(self, mod) -> None:
        """Replace the GPU queries a real module bound at import with the scenario's."""
        for name, fake in self.gpu.module_fakes().items():
            if name in mod.__dict__:
                setattr(mod, name, fake)
