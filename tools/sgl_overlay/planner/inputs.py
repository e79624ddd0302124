"""The deployment: model, GPU, TP, flags (parsed by the tree's own
ServerArgs), free memory, and the tree they run on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..harness import layout as layout_mod
from ..harness.readings import ReadingKind
from ..harness.protocol import FlagsFailure
from ..harness.run import run_flags
from .. import project
from . import gpus as gpus_mod
from . import model as model_mod

GIB = 1 << 30

# SGLang's --dtype names for the torch dtypes (server_args.py: "half", "float" are aliases)
DTYPE_FLAG = {"half": "float16", "float": "float32"}


@dataclass
class Memory:
    """Free memory per GPU before and after the weights load, of a kind (harness/readings.py): the
    sizing's own readings, or a log's "Load weight begin" / "Load weight end ... avail mem", from which
    the harness derives the sizing's (the stream pool, the RoPE pre-expansion, the rounding)."""

    pre_free_gib: float
    post_free_gib: float
    weights_gib: float  # per rank
    source: str  # "given" | "estimated"
    notes: list[str] = field(default_factory=list)
    kind: ReadingKind = ReadingKind.SIZING
    pre_rounding_gib: float = 0.0
    post_rounding_gib: float = 0.0

    def shifted(self, pre_gib: float, post_gib: float, weights_gib: float = 0.0) -> "Memory":
        """The same memory with the readings (and the weights) moved: a sensitivity run."""
        return dataclasses.replace(self, pre_free_gib=self.pre_free_gib + pre_gib,
                                   post_free_gib=self.post_free_gib + post_gib, weights_gib=self.weights_gib + weights_gib)


@dataclass
class Tree:
    root: Path
    label: str  # release version, or what the tree was built from, or the path
    era: str
    warning: str | None = None  # e.g. the default tree is older than the patch series


@dataclass
class Deployment:
    tree: Tree
    model: model_mod.ModelInput
    draft: dict | None
    gpu: gpus_mod.Gpu | None
    memory: Memory
    argv: list[str]  # SGLang flags as given
    fields: dict  # ServerArgs fields they set (parsed by the release's own ServerArgs)
    dropped: list[str] = field(default_factory=list)

    @property
    def tp(self) -> int:
        return int(self.fields.get("tp_size") or 1)

    def context_len(self, overrides: dict | None = None) -> int:
        o = overrides or {}
        return int(o.get("context_length") or self.fields.get("context_length") or self.model.context_len())

    def request(self, overrides: dict | None = None, memory: Memory | None = None) -> dict:
        """The harness request (the same plain data a scenario file gives)."""
        m = memory or self.memory
        server = {"tp_size": self.tp, "page_size": 1, "kv_cache_dtype": "auto"}
        server.update(self.fields)
        server.update(overrides or {})
        if server.get("speculative_algorithm") and self.draft and not server.get("speculative_draft_model_path"):
            server["speculative_draft_model_path"] = self.draft["path"]
        model = self.model.harness_model(self.context_len(overrides))
        # --dtype overrides the checkpoint's dtype (SGLang's ModelConfig), and with it the KV cells
        # of --kv-cache-dtype auto; "auto" keeps the config's
        if server.get("dtype") not in (None, "auto"):
            model["dtype"] = DTYPE_FLAG.get(server["dtype"], server["dtype"])
        return {
            "name": "plan",
            "gpu": {"pre_load_free_gib": m.pre_free_gib, "post_load_free_gib": m.post_free_gib,
                    "readings": m.kind, "pre_rounding_gib": m.pre_rounding_gib,
                    "post_rounding_gib": m.post_rounding_gib,
                    "weights_gib": m.weights_gib, "world_size": self.tp,
                    # the hardware probes of the release's own flag resolution
                    # (no --gpu: a device the probes cannot name; the rules take their
                    # own unknown-memory branches: stated in the plan's assumptions)
                    **({"device_name": self.gpu.device_name, "capability": list(self.gpu.capability),
                        "total_mib": self.gpu.total_mib} if self.gpu else
                       {"device_name": None, "capability": None, "total_mib": None})},
            "model": model,
            "server": server,
            "draft": self.draft,
        }


def resolve_tree(tree: str | None, release: str | None, checkout: Path | None = None) -> Tree:
    """The tree to plan: ``tree`` (--tree), a published ``release``, or the
    patched tree tools/apply.py builds in the checkout (``checkout``, else
    the one project.find_root finds), checked against its series."""
    if tree and release:
        raise UsageError("give --tree or --release, not both", hint="--tree PATH plans a source tree; "
                         "--release X plans a published release")
    if release:
        from .. import release_trees

        root = layout_mod.source_root(release_trees.release_tree(release))
        return Tree(root, release, layout_mod.detect(root).era)
    if not tree:
        checkout = project.find_root(checkout)
    path = Path(tree) if tree else checkout / "build" / "sglang"
    if not tree and not (path / "python" / "sglang" / "srt").is_dir():
        raise UsageError(
            f"no patched SGLang tree at {path} (the planner's default tree)",
            hint="build it with `python tools/apply.py` (writes build/sglang), or plan another tree with "
                 "--tree PATH or a published release with --release VERSION")
    try:
        root = layout_mod.source_root(path)
        era = layout_mod.detect(root).era
    except layout_mod.NoSource as e:
        raise UsageError(str(e), hint="pass --tree with an SGLang checkout, build/sglang or an unpacked wheel") from None
    return Tree(root, _label(path, root), era, _staleness(path, checkout) if not tree else None)


def _label(path: Path, root: Path) -> str:
    """A release's version, or for a tree tools/apply.py built: what it was built from."""
    from .. import builder

    man = builder.read_manifest(path)
    if man:
        lock = man.get("lock") or {}
        return (f"{lock.get('version')} + {len(man.get('patches') or [])} patches "
                f"(patched tree {path}, stack {str(man.get('stack_digest'))[:12]})")
    return layout_mod.version_of(root) or str(path)


def _staleness(path: Path, checkout: Path) -> str | None:
    """The default tree against the checkout's current series: a warning, or None."""
    from .. import builder, series

    man = builder.read_manifest(path)
    try:
        digest = series.load(checkout).digest
    except Exception:  # noqa: BLE001 - a series being edited: no verdict on staleness
        return None
    if man and man.get("stack_digest") != digest:
        return (f"{path} was built from another patch stack than patches/series now holds "
                f"(stack {str(man.get('stack_digest'))[:12]} vs {digest[:12]}); rebuild it with "
                f"`python tools/apply.py` to plan the current patches")
    return None


def parse_flags(tree: Tree, argv: list[str]) -> tuple[dict, list[str]]:
    """SGLang's flags, parsed by that tree's own ServerArgs (harness/child/flags.py)."""
    res = run_flags(tree.root, argv)
    if res.ok:
        return res.fields, res.dropped
    if res.failure is FlagsFailure.FLAG:
        hints = "; ".join(res.hints)
        raise UsageError(
            f"SGLang {tree.label} rejects the server flags: {res.error}"
            + (f" ({hints})" if hints else ""),
            hint=f"this release declares {res.known_flags} flags; see `python -m sglang.launch_server "
                 f"--help` for that release, or plan another release with --release")
    raise UsageError(f"cannot parse flags with SGLang {tree.label}'s own ServerArgs: {res.error}",
                     hint="the planner parses flags with each release's own ServerArgs (v0.5.5-v0.5.23, patched "
                          "trees of the pin); plan another release with --release")


def memory_for(mi: model_mod.ModelInput, gpu: gpus_mod.Gpu | None, tp: int, free_gib: list[float] | None,
               overhead_gib: float, kind: ReadingKind = ReadingKind.SIZING,
               rounding_gib: tuple[float, float] = (0.0, 0.0)) -> Memory:
    """The plan's free memory.  ``free_gib`` (--free-gib) is of ``kind`` (--readings; the sizing's own by
    default), each value within its ``rounding_gib`` (half its last digit, for a logged one); the estimate
    from ``gpu`` is of "Load weight begin" (the total less the assumed start-up overhead), so the sizing's
    readings are derived from it as from a log's (harness/readings.py)."""
    weights_rank = mi.weights_bytes / GIB / tp
    words = {ReadingKind.SIZING: "the sizing's own readings", ReadingKind.LOGGED: 'the log\'s "Load weight begin" / '
             '"Load weight end" readings (the sizing\'s are derived: readings below)'}
    if free_gib:
        pre = float(free_gib[0])
        unnamed = [] if gpu is not None else [
            "no --gpu: the release's flag resolution sees a CUDA device it cannot name, of unknown "
            "capability and memory (its own fallback branches, e.g. chunked prefill and CUDA-graph sizes)"]
        pre_r, post_r = rounding_gib if kind is ReadingKind.LOGGED else (0.0, 0.0)
        if len(free_gib) > 1:
            post = float(free_gib[1])
            return Memory(pre, post, pre - post, "given",
                          [f"free memory given: {pre} GiB before the weights, {post} GiB after "
                           f"(so {pre - post:.2f} GiB of weights per rank), as {words[kind]}"] + unnamed,
                          kind, pre_r, post_r)
        return Memory(pre, pre - weights_rank, weights_rank, "given",
                      [f"free memory before the weights given: {pre} GiB, as {words[kind]}",
                       f"weights per rank: {mi.weights_source}, divided by TP {tp}"] + unnamed,
                      kind, pre_r, pre_r)
    if gpu is None:
        raise UsageError("no GPU and no free-memory figures",
                         hint=f"pass --gpu NAME (one of: {', '.join(gpus_mod.names())}) or --free-gib PRE[,POST]")
    pre = gpu.total_gib - overhead_gib
    return Memory(pre, pre - weights_rank, weights_rank, "estimated", [
        f"total memory of {gpu.name}: {gpu.total_mib:,} MiB = {gpu.total_gib:.2f} GiB ({gpu.source})",
        f"free before the weights (\"Load weight begin\"): total - {overhead_gib} GiB assumed start-up overhead "
        f"(CUDA context, NCCL, workspaces; the incident measured 1.35 GiB on an RTX PRO 6000 at TP1) = {pre:.2f} GiB; "
        f"the sizing's own readings are derived from it and the free memory after the weights as from a log's",
        f"weights per rank: {mi.weights_source}, divided by TP {tp} = {weights_rank:.2f} GiB "
        f"(assumes an even split)",
    ], ReadingKind.LOGGED)
