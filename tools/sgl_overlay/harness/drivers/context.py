"""The context of one run: the tree, the finder that loads its real modules,
the GPU stand-ins, and the records (figures, notes, upstream's reads).  Built
completely by the constructor; the run's inputs are computed from it by
``inputs.runner_inputs``."""

from __future__ import annotations

from pathlib import Path

from .. import draft_reading, loader
from ..layout import Layout
from ..standins import GPU, install_transformers_standin


class Untestable(Exception):
    """The harness cannot drive this tree for this scenario (exit 125)."""


class Context:
    """Everything one run shares: the tree, the finder, the stand-ins, the records."""

    def __init__(self, root: Path, layout: Layout, request: dict):
        self.root = root
        self.layout = layout
        self.req = request
        self.reads: set[str] = set()
        self.figures: dict = {}
        self.notes: list[str] = []
        # The sizing's own ledger where the tree keeps it in memory (the memory
        # topic's v0.5.23 port: KVCacheConfigurator.memory_ledger), as a dict.
        self.ledger: dict | None = None
        gpu = request["gpu"]
        server = request["server"]
        tp = int(server.get("tp_size", 1))
        # From v0.5.14 the drafter's weights are on the GPU at the sizing's reading (draft_reading.py).
        self.drafter_reading = draft_reading.decide(
            draft_reading.drafter_loads_before_sizing(root), bool(server.get("speculative_algorithm")),
            (request.get("draft") or {}).get("weights_gib"))
        lowered = self.drafter_reading["lowered_by_gib"]
        per_rank = gpu.get("post_load_free_gib_per_rank")
        self.gpu = GPU(float(gpu["post_load_free_gib"]) - lowered, int(gpu.get("world_size", tp)), tp,
                       per_rank=[float(x) - lowered for x in per_rank] if per_rank else None)
        if self.drafter_reading["note"]:
            self.notes.append(self.drafter_reading["note"])
        self.pre_load = float(gpu["pre_load_free_gib"])
        self.transformers_standin = install_transformers_standin()
        import importlib.util as _ilu

        if _ilu.find_spec("triton") is None:  # GPU compiler: imported at module level from v0.5.18
            import sys as _sys

            for name in ("triton", "triton.language"):
                _sys.modules.setdefault(name, loader.StubModule(name))
        extra = [
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
            "sglang.srt.distributed.utils",
            "sglang.srt.arg_groups.speculative_hook",
            "sglang.srt.speculative.ddtree_algo",  # DDTREE's registration and rules (patched trees)
            "sglang.srt.model_executor.memory_budget",  # the memory patches' module (patched trees)
        ]
        # The release's flag-resolution package (v0.5.13+): every module of it real.
        groups = root / "sglang" / "srt" / "arg_groups"
        if groups.is_dir():
            extra += sorted(".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
                            for p in groups.rglob("*.py"))
        real = [m for m in list(layout.real) + extra if self.exists(m)]
        self.finder = loader.install(root, real)
        loader.set_fakes(self.gpu.module_fakes())
        draft_hf = (request.get("draft") or {}).get("hf_config")
        if draft_hf is not None:
            # The drafter's own config.json (the planner passes it): the release's
            # ServerArgs rules read it through get_config(--speculative-draft-model-path),
            # e.g. DFLASH's block size when --speculative-dflash-block-size is unset.
            import types as _types

            loader.set_fakes({"get_config": lambda *a, **k: _types.SimpleNamespace(**draft_hf)})

    def exists(self, module: str) -> bool:
        base = self.root.joinpath(*module.split("."))
        return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()

    def load(self, module: str):
        mod = loader.load(module)
        self.patch(mod)
        return mod

    def patch(self, mod) -> None:
        """Replace the GPU queries a real module bound at import with the scenario's."""
        for name, fake in self.gpu.module_fakes().items():
            if name in mod.__dict__:
                setattr(mod, name, fake)
