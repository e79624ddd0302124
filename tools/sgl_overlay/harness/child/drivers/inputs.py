"""The run's inputs, computed from its context: the server-args view (the
tree's own defaults and speculative-decoding rules applied), the
runtime-context accessors, the model config view, and the runner's
attributes."""

from __future__ import annotations

import dataclasses

import torch

from ...model_shape import ModelKind, ModelShape
from .. import loader
from ..standins import GIB, ModelConfigView, View
from .context import Context, Untestable
from .defaults import KV_DTYPES
from .. import resolution


def _ns(**kw):
    import types

    return types.SimpleNamespace(**kw)


class _Group:
    """A settings group such as v0.5.17+'s ``get_exec().mamba``: the names
    given here, else the server-args view's (called where the view has a
    method, e.g. ``enable_mamba_extra_buffer()``), so a missing input is
    still named by the view."""

    def __init__(self, base, **own):
        self.__dict__.update(own, _base=base)

    def __getattr__(self, name):
        value = getattr(self._base, name)
        return value() if callable(value) else value


class _NsGroup:
    """v0.5.22+'s config bags (``get_exec()``, ``get_exec().features`` ...),
    laid out by the release's own namespace map (``ServerArgs._NS_BY_FIELD``,
    what runtime_context._build_config_bags projects at publish): a name that
    is a sub-namespace gives the sub-bag, any other the resolved server
    args' value (then the harness's own group of that name, e.g. ``mamba``)."""

    def __init__(self, sa, path: str, nsmap: dict, harness: dict):
        self.__dict__.update(_sa=sa, _path=path, _nsmap=nsmap, _harness=harness)

    def __getattr__(self, name):
        sub = f"{self._path}.{name}"
        if any(p == sub or p.startswith(sub + ".") for p in self._nsmap.values()):
            return _NsGroup(self._sa, sub, self._nsmap, self._harness)
        derived = self._derived(name)
        if derived is not None:
            return derived()
        try:
            return getattr(self._sa, name)
        except AttributeError:
            if name in self._harness:
                return self._harness[name]
            raise

    def _derived(self, name):
        """A leaf the release derives at publish (``Derived(fn=...)`` in its
        namespace class; runtime_context._install_derived_leaves): its own fn,
        on the release's resolved_view of the server args."""
        import importlib

        for source in getattr(type(self._sa), "_NAMESPACES", ()) or ():
            if getattr(source, "_NS_PATH", None) != self._path:
                continue
            decl = vars(source).get(name)
            fn = getattr(decl, "fn", None)
            if type(decl).__name__ != "Derived":
                continue
            if not fn:
                default = getattr(decl, "default", None)
                return lambda: default if type(default).__name__ != "_NoDefault" else None
            module, _, attr = fn.rpartition(".")
            overrides = importlib.import_module("sglang.srt.arg_groups.overrides")
            return lambda: getattr(importlib.import_module(module), attr)(overrides.resolved_view(self._sa))
        return None


class _RuntimeContext:
    """v0.5.19+'s ``get_context()``: reads from the resolved server args; its
    ``override(source, **fields)`` (RuntimeContext.override: write resolved
    leaves onto the config bags the accessors read) writes them there."""

    def __init__(self, sa):
        self.__dict__["_sa"] = sa
        self.__dict__["overrides"] = []

    def __getattr__(self, name):
        return getattr(self._sa, name)

    def override(self, source=None, **fields):
        self.overrides.append((source, fields))
        for k, v in fields.items():
            resolution.force_set(self._sa, k, v)


@dataclasses.dataclass(frozen=True)
class RunnerInputs:
    attrs: dict                     # the runner's attributes, by upstream's names
    server_args: object             # the release's own resolved ServerArgs, as attrs["server_args"]
    accessors: dict                 # runtime-context accessors (v0.5.16+): name -> () -> server_args


def spec_algorithm(ctx: Context):
    name = ctx.req["server"].get("speculative_algorithm")
    spec_info = ctx.load("sglang.srt.speculative.spec_info")
    try:
        return spec_info.SpeculativeAlgorithm.from_string(name)
    except ValueError as e:
        raise Untestable(
            f"this tree has no speculative algorithm {name!r} "
            f"(sglang/srt/speculative/spec_info.py: {e})"
        ) from None


def server_args(ctx: Context, mc=None):
    """The tree's own ServerArgs, built from the scenario's flags by the
    release's own resolution (``resolution.resolve``): its ``__post_init__``
    and every rule it calls, in its order, with only the hardware probes and
    the model answered from the scenario."""
    if ctx.req["server"].get("speculative_algorithm"):
        spec_algorithm(ctx)  # a tree without the algorithm is untestable, said first
    if not ctx.exists("sglang.srt.server_args"):
        raise Untestable("this tree has no sglang/srt/server_args.py")
    sa_mod = ctx.load("sglang.srt.server_args")
    hf = {"target": getattr(mc, "hf_config", None), "draft": draft_hf_config(ctx)}
    sa, changes, notes = resolution.resolve(ctx, sa_mod.ServerArgs, mc, hf)
    ctx.figures["resolution"] = changes
    ctx.notes.extend(notes)
    ctx.notes.append(f"ServerArgs resolved by the release's own rules: {len(changes)} flag(s) changed")
    return sa


def draft_hf_config(ctx: Context):
    """The drafter's HF config: its config.json where the planner passes it,
    else the scenario's [draft] table."""
    import types as _types

    draft = ctx.req.get("draft") or {}
    if draft.get("hf_config") is not None:
        return _types.SimpleNamespace(**draft["hf_config"])
    if not draft:
        return None
    return _types.SimpleNamespace(
        architectures=list(draft.get("architectures", ["DFlashDraftModel"])),
        num_hidden_layers=draft["num_hidden_layers"], num_key_value_heads=draft.get("num_key_value_heads"),
        head_dim=draft.get("head_dim"), block_size=draft.get("block_size"),
        dflash_config={"block_size": draft.get("block_size")} if draft.get("block_size") else None,
    )


def _install_runtime_context(ctx: Context, sa) -> dict:
    """v0.5.16+ read parallel/schedule/memory settings through runtime-context
    accessors (``get_parallel()``, ``get_schedule()`` ...); each returns the
    server-args view, which also carries the single-node parallel layout.
    Returns the accessors (name -> function)."""
    tp = int(ctx.req["server"].get("tp_size", 1))
    for k, v in dict(
        attn_dp_size=1, attn_tp_size=tp, attn_cp_size=1, attn_dcp_size=1, moe_dp_size=1,
        launch_world_size=ctx.gpu.world.world_size, world_group=ctx.gpu.world, tp_size=tp,
        enable_unified_memory=False, mm_feature_transport=None, prefill_max_requests=None,
        # v0.5.22+: get_exec().graph.cuda_graph_config.prefill.* (no prefill graph capture)
        mamba=_Group(sa, enable_linear_replayssm=False, enable_linear_replayssm_spec=False,
                     linear_replayssm_cache_len=0),  # v0.5.17+: get_exec().mamba.*
        features=_Group(sa),  # v0.5.17+: get_exec().features.* (the pools' enable_memory_saver)
        graph=_ns(cuda_graph_config=_ns(prefill=_ns(full_prefill_max_req=None, backend=None))),
    ).items():
        if getattr(sa, k, None) is None:
            resolution.force_set(sa, k, v)
    accessors = {name: (lambda: sa) for name in (
        "get_schedule", "get_parallel", "get_exec", "get_disagg", "get_mm", "get_memory",
        "get_spec", "get_model")}
    nsmap = getattr(type(sa), "_NS_BY_FIELD", None)
    if nsmap:  # v0.5.22+: the bags by the release's own namespace map
        tops = {p.split(".")[0] for p in nsmap.values()}
        harness = {"mamba": getattr(sa, "mamba", None), "graph": getattr(sa, "graph", None)}
        for top in tops:
            if f"get_{top}" in accessors and top != "parallel":
                accessors[f"get_{top}"] = (lambda t=top: _NsGroup(sa, t, nsmap, harness))
    accessors["get_context"] = lambda: _RuntimeContext(sa)
    accessors.update(_runtime_context_predicates(ctx, accessors))
    loader.set_fakes(accessors)
    # v0.5.20+ read resolved flags through arg_groups.overrides.resolving_view(server_args)
    loader.set_fakes({"resolving_view": lambda args, *a, **k: args})
    return accessors


# v0.5.18-v0.5.19: predicates runtime_context defines over the published bags and the
# configurator calls (its Mamba ratio, the pools' extra buffer); as stand-ins they were
# falsy (extra_buffer counted 3 slots per request instead of 5: docs/results/regress.md, public logs)
_RUNTIME_CONTEXT_PREDICATES = ("mamba_extra_buffer_enabled", "mamba_extra_buffer_lazy_enabled")


def _runtime_context_predicates(ctx: Context, accessors: dict) -> dict:
    """The release's own runtime_context predicates, run on the accessors above."""
    path = ctx.root / "sglang" / "srt" / "runtime_context.py"
    if not path.is_file():
        return {}
    source = path.read_text(encoding="utf-8")
    names = [n for n in _RUNTIME_CONTEXT_PREDICATES if f"def {n}(" in source]
    if not names:
        return {}
    return loader.definitions(ctx.root, "sglang.srt.runtime_context", names, dict(accessors))


def weights_module(ctx: Context):
    """The loaded model as far as memory goes: one buffer of the scenario's
    weight bytes on torch's meta device (no memory is taken), or None."""
    gib = ctx.req["gpu"].weights_gib
    if gib is None:
        return None
    module = torch.nn.Module()
    module.register_buffer("weights", torch.empty(int(gib * GIB), dtype=torch.uint8, device="meta"))
    return module


def kv_cache_dtype(ctx: Context):
    name = ctx.req["server"].get("kv_cache_dtype", "auto")
    if name not in KV_DTYPES:
        raise Untestable(f"kv_cache_dtype {name!r} is not one the harness maps ({', '.join(KV_DTYPES)})")
    dt = KV_DTYPES[name]
    return dt if dt is not None else getattr(torch, ctx.req["model"].dtype)


def model(ctx: Context):
    """(model_config view, mambaish text config or None, num attention layers)."""
    m: ModelShape = ctx.req["model"]
    kind = m.kind
    if kind is ModelKind.DENSE:
        hf = View("hf_config", ctx.reads, architectures=list(m["architectures"]),
                  num_hidden_layers=m["num_hidden_layers"], num_key_value_heads=m["num_key_value_heads"],
                  head_dim=m["head_dim"], model_type=kind.value)
        mc = ModelConfigView(
            "model_config", ctx.reads, hf_config=hf, hf_text_config=hf,
            num_hidden_layers=m["num_hidden_layers"], num_attention_layers=m["num_hidden_layers"],
            num_key_value_heads=m["num_key_value_heads"], head_dim=m["head_dim"], v_head_dim=m["head_dim"],
            context_len=m["context_len"], is_hybrid_swa=False, is_multimodal=False,
            full_attention_layer_ids=list(range(m["num_hidden_layers"])), attention_arch="MHA",
            dtype=getattr(torch, m.dtype), is_hybrid_swa_compress=False,
            swa_attention_layer_ids=[],
            # v0.5.17+ ModelConfig.has_asymmetric_kv: K and V rows of one width here (v_head_dim is
            # head_dim, no sliding-window layers)
            has_asymmetric_kv=False,
        )
        return mc, None, m["num_hidden_layers"]
    if kind is ModelKind.QWEN3_5:
        if not ctx.exists("sglang.srt.configs.qwen3_5"):
            raise Untestable("this tree has no sglang/srt/configs/qwen3_5.py (Qwen3.5/3.6 config class)")
        q = ctx.load("sglang.srt.configs.qwen3_5")
        for mod in ("sglang.srt.configs.qwen3_next", "sglang.srt.configs.mamba_utils", "sglang.srt.configs.qwen3_vl"):
            ctx.patch(loader.load(mod))
        text = q.Qwen3_5TextConfig(**m["text_config"])
        # the vision tower's config as the tree's own Qwen3_5Config builds it: the checkpoint's
        # vision_config, else the class's defaults (read by the release's flag resolution:
        # ServerArgs.adjust_mem_fraction_for_vlm scales SGLang's own --mem-fraction-static by it)
        vision = q.Qwen3_5VisionConfig(**(m.get("vision_config") or {}))
        hf = View("hf_config", ctx.reads, architectures=list(m["architectures"]), text_config=text,
                  vision_config=vision, model_type=kind.value)
        object.__setattr__(hf, "get_text_config", lambda *a, **k: text)
        layers = text.full_attention_layer_ids
        mc = ModelConfigView(
            "model_config", ctx.reads, hf_config=hf, hf_text_config=text,
            num_hidden_layers=text.num_hidden_layers, num_attention_layers=len(layers),
            num_key_value_heads=text.num_key_value_heads, head_dim=text.head_dim, v_head_dim=text.head_dim,
            context_len=m["context_len"], is_hybrid_swa=False, is_multimodal=True,
            full_attention_layer_ids=layers, attention_arch="MHA",
            dtype=getattr(torch, m.dtype), is_hybrid_swa_compress=False,
            swa_attention_layer_ids=[],
            # v0.5.17+ ModelConfig.has_asymmetric_kv: K and V rows of one width here (v_head_dim is
            # head_dim, no sliding-window layers)
            has_asymmetric_kv=False,
        )
        return mc, text, text.num_hidden_layers


def runner_inputs(ctx: Context) -> RunnerInputs:
    """The server-args view, the runtime-context accessors and the runner's
    attributes, in the order upstream's modules need them loaded (DFLASH's
    utilities first, with the GPU stand-ins)."""
    if ctx.exists("sglang.srt.speculative.dflash_utils"):
        ctx.patch(loader.load("sglang.srt.speculative.dflash_utils"))
    mc, mambaish, num_layers = model(ctx)
    sa = server_args(ctx, mc)
    ctx.take_readings(sa)  # the sizing's own readings, from the resolved flags (readings.py)
    accessors = _install_runtime_context(ctx, sa)
    if mambaish is not None:  # after the runtime context: v0.5.16+ read the TP layout through it
        params = mambaish.mamba2_cache_params
        ctx.figures["mamba_cache_per_req_bytes"] = int(params.mamba_cache_per_req)
        ctx.figures["mamba_layers"] = len(params.layers)
    spec = spec_algorithm(ctx)
    draft = ctx.req.get("draft") or {}
    ctx.figures["speculative_num_draft_tokens"] = sa.speculative_num_draft_tokens
    ctx.figures["max_running_requests_flag"] = sa.max_running_requests
    ctx.figures["disable_overlap_schedule"] = sa.disable_overlap_schedule
    attrs = dict(
        device="cuda",
        gpu_id=0,
        tp_rank=0,
        tp_size=int(ctx.req["server"].get("tp_size", 1)),
        pp_rank=0,
        pp_size=1,
        dp_size=1,
        is_draft_worker=False,
        num_effective_layers=num_layers,
        start_layer=0,
        end_layer=num_layers,
        kv_cache_dtype=kv_cache_dtype(ctx),
        dtype=mc.dtype,
        use_mla_backend=False,
        mem_fraction_static=float(sa.mem_fraction_static),
        is_hybrid=False,
        is_hybrid_swa=False,
        is_hybrid_swa_compress=False,
        page_size=int(sa.page_size),
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        model=weights_module(ctx),
        spec_algorithm=spec,
        mambaish_config=mambaish,
        hybrid_gdn_config=mambaish,
        mamba2_config=None,
        kimi_linear_config=None,
        hybrid_kda_config=None,
        server_args=sa,
        model_config=mc,
        dflash_draft_num_layers=(
            draft.get("num_hidden_layers") if getattr(spec, "is_dflash", lambda: False)() else None
        ),
        enable_hisparse=False,
        sliding_window_size=None,
        is_generation=True,
    )
    return RunnerInputs(attrs=attrs, server_args=sa, accessors=accessors)
