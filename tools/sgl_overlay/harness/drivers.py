"""Drive the real upstream sizing code of one tree, in this interpreter.

Runs inside the child interpreter (``child.py``).  One driver per layout era;
they share the model/config construction and the GPU stand-ins.  Each returns
a dict of recorded figures; exceptions propagate to the child, which
classifies them.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from . import loader
from .layout import Layout
from .standins import (
    GIB,
    GPU,
    MissingInput,
    ModelConfigView,
    ServerArgsView,
    View,
    install_transformers_standin,
)


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


class Untestable(Exception):
    """The harness cannot drive this tree for this scenario (exit 125)."""


KV_DTYPES = {
    "auto": None,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}

# ServerArgs defaults for the fields the sizing reads, used where the tree's own
# ServerArgs dataclass cannot be loaded to supply them.
FALLBACK_DEFAULTS = dict(
    max_running_requests=None,
    max_total_tokens=None,
    max_mamba_cache_size=None,
    mamba_full_memory_ratio=0.9,
    mamba_scheduler_strategy="no_buffer",
    disable_radix_cache=False,
    disable_overlap_schedule=False,
    enable_dp_attention=False,
    dp_size=1,
    pp_size=1,
    tp_size=1,
    page_size=1,
    speculative_algorithm=None,
    speculative_num_draft_tokens=None,
    speculative_num_steps=None,
    speculative_eagle_topk=None,
    disaggregation_mode="null",
    enable_memory_saver=False,
    attention_backend=None,
    enable_double_sparsity=False,
    enable_mixed_chunk=False,
    speculative_draft_model_path=None,
    speculative_draft_model_revision=None,
    speculative_dflash_block_size=None,
    speculative_draft_window_size=None,
    speculative_moe_runner_backend=None,
    speculative_skip_dp_mlp_sync=False,
    moe_runner_backend="auto",
    trust_remote_code=False,
    json_model_override_args="{}",
    device="cuda",
    speculative_draft_attention_backend=None,
    enable_dp_lm_head=False,
    moe_a2a_backend="none",
    speculative_moe_a2a_backend=None,
    attn_cp_size=1,
    revision=None,
    enable_pdmux=False,
    enable_hisparse=False,
    qsa_indexer_dtype=None,
    prefill_only_disable_kv_cache=False,  # read when the pools are built (allocation.py)
)


class Context:
    """Everything one run shares: the tree, the finder, the stand-ins, the records."""

    def __init__(self, root: Path, layout: Layout, request: dict):
        self.root = root
        self.layout = layout
        self.req = request
        self.reads: set[str] = set()
        self.figures: dict = {}
        self.notes: list[str] = []
        gpu = request["gpu"]
        server = request["server"]
        tp = int(server.get("tp_size", 1))
        self.gpu = GPU(float(gpu["post_load_free_gib"]), int(gpu.get("world_size", tp)), tp,
                       per_rank=gpu.get("post_load_free_gib_per_rank"))
        self.pre_load = float(gpu["pre_load_free_gib"])
        self.transformers_standin = install_transformers_standin()
        import importlib.util as _ilu

        if _ilu.find_spec("triton") is None:  # GPU compiler: imported at module level from v0.5.18
            import sys as _sys

            for name in ("triton", "triton.language"):
                _sys.modules.setdefault(name, loader.StubModule(name))
        extra = [
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

    # ---- inputs ---------------------------------------------------------
    def spec_algorithm(self):
        name = self.req["server"].get("speculative_algorithm")
        spec_info = self.load("sglang.srt.speculative.spec_info")
        try:
            return spec_info.SpeculativeAlgorithm.from_string(name)
        except ValueError as e:
            raise Untestable(
                f"this tree has no speculative algorithm {name!r} "
                f"(sglang/srt/speculative/spec_info.py: {e})"
            ) from None

    def server_args(self) -> ServerArgsView:
        if self.req["server"].get("speculative_algorithm"):
            self.spec_algorithm()  # a tree without the algorithm is untestable, said first
        values = dict(FALLBACK_DEFAULTS)
        values.update(self._server_args_defaults())
        values.update(self.req["server"])
        values.setdefault("device", "cuda")
        if values.get("device") is None:
            values["device"] = "cuda"  # the scenarios model CUDA GPUs
        values.pop("kv_cache_dtype", None)  # the runner holds the torch dtype
        values["kv_cache_dtype"] = self.req["server"].get("kv_cache_dtype", "auto")
        # Releases from v0.5.14 renamed --mamba-scheduler-strategy's field.
        if "mamba_radix_cache_strategy" in values and "mamba_scheduler_strategy" in self.req["server"]:
            values["mamba_radix_cache_strategy"] = self.req["server"]["mamba_scheduler_strategy"]
        view = ServerArgsView("server_args", self.reads, **values)
        sa_mod = getattr(self, "server_args_module", None)
        if sa_mod is not None:
            import types as _types

            for name in ("enable_mamba_extra_buffer", "enable_mamba_extra_buffer_lazy"):
                fn = getattr(sa_mod.ServerArgs, name, None)
                if fn is not None:
                    object.__setattr__(view, name, _types.MethodType(fn, view))
        if values.get("speculative_algorithm"):
            self._release_spec_rules(view)
        return view

    def _server_args_defaults(self) -> dict:
        """Field defaults of the tree's own ServerArgs, when its module loads."""
        if not self.exists("sglang.srt.server_args"):
            return {}
        try:
            loader.add_real(self.finder, "sglang.srt.server_args")
            sa = self.load("sglang.srt.server_args")
            out = {}
            for f in dataclasses.fields(sa.ServerArgs):
                if f.default is not dataclasses.MISSING:
                    out[f.name] = f.default
                elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                    try:
                        out[f.name] = f.default_factory()  # type: ignore[misc]
                    except Exception:
                        pass
            self.server_args_module = sa
            return out
        except Exception as e:  # the module does not load with stand-ins in this release
            self.notes.append(f"ServerArgs defaults not loaded ({type(e).__name__}: {e}); using harness defaults")
            self.server_args_module = None
            return {}

    def _release_spec_rules(self, view: ServerArgsView) -> None:
        """Apply the tree's own ServerArgs rules for the speculative algorithm."""
        algo = view.speculative_algorithm
        if self.exists("sglang.srt.arg_groups.speculative_hook"):
            hook = self.load("sglang.srt.arg_groups.speculative_hook")
            fn = getattr(hook, f"_handle_{algo.lower()}", None)
            if fn is None:
                raise Untestable(f"sglang/srt/arg_groups/speculative_hook.py has no _handle_{algo.lower()}")
            fn(view)
            self.notes.append(f"ServerArgs rules: arg_groups.speculative_hook._handle_{algo.lower()}")
            return
        sa = getattr(self, "server_args_module", None)
        if sa is None or not hasattr(sa.ServerArgs, "_handle_speculative_decoding"):
            raise Untestable("cannot run this tree's ServerArgs speculative-decoding rules (server_args.py did not load)")
        sa._resolve_speculative_algorithm_alias = lambda algo, *a, **k: algo
        sa.ServerArgs._handle_speculative_decoding(view)
        self.notes.append("ServerArgs rules: ServerArgs._handle_speculative_decoding")

    def _install_runtime_context(self, sa) -> None:
        """v0.5.16+ read parallel/schedule/memory settings through runtime-context
        accessors (``get_parallel()``, ``get_schedule()`` ...); each returns the
        server-args view, which also carries the single-node parallel layout."""
        tp = int(self.req["server"].get("tp_size", 1))
        for k, v in dict(
            attn_dp_size=1, attn_tp_size=tp, attn_cp_size=1, attn_dcp_size=1, moe_dp_size=1,
            launch_world_size=self.gpu.world.world_size, world_group=self.gpu.world, tp_size=tp,
            enable_unified_memory=False, mm_feature_transport=None, prefill_max_requests=None,
            # v0.5.22+: get_exec().graph.cuda_graph_config.prefill.* (no prefill graph capture)
            mamba=_Group(sa, enable_linear_replayssm=False, enable_linear_replayssm_spec=False,
                         linear_replayssm_cache_len=0),  # v0.5.17+: get_exec().mamba.*
            graph=_ns(cuda_graph_config=_ns(prefill=_ns(full_prefill_max_req=None, backend=None))),
        ).items():
            if getattr(sa, k, None) is None:
                object.__setattr__(sa, k, v)
        self.accessors = {name: (lambda: sa) for name in (
            "get_schedule", "get_parallel", "get_exec", "get_disagg", "get_mm", "get_memory",
            "get_spec", "get_model", "get_context")}
        loader.set_fakes(self.accessors)
        # v0.5.20+ read resolved flags through arg_groups.overrides.resolving_view(server_args)
        loader.set_fakes({"resolving_view": lambda args, *a, **k: args})

    def weights_module(self):
        """The loaded model as far as memory goes: one buffer of the scenario's
        weight bytes on torch's meta device (no memory is taken), or None."""
        gib = self.req["gpu"].get("weights_gib")
        if gib is None:
            return None
        module = torch.nn.Module()
        module.register_buffer("weights", torch.empty(int(gib * GIB), dtype=torch.uint8, device="meta"))
        return module

    def kv_cache_dtype(self):
        name = self.req["server"].get("kv_cache_dtype", "auto")
        if name not in KV_DTYPES:
            raise Untestable(f"kv_cache_dtype {name!r} is not one the harness maps ({', '.join(KV_DTYPES)})")
        dt = KV_DTYPES[name]
        return dt if dt is not None else getattr(torch, self.req["model"].get("dtype", "bfloat16"))

    def model(self):
        """(model_config view, mambaish text config or None, num attention layers)."""
        m = self.req["model"]
        kind = m.get("kind", "dense")
        if kind == "dense":
            hf = View("hf_config", self.reads, architectures=list(m["architectures"]),
                      num_hidden_layers=m["num_hidden_layers"], num_key_value_heads=m["num_key_value_heads"],
                      head_dim=m["head_dim"], model_type="dense")
            mc = ModelConfigView(
                "model_config", self.reads, hf_config=hf, hf_text_config=hf,
                num_hidden_layers=m["num_hidden_layers"], num_attention_layers=m["num_hidden_layers"],
                num_key_value_heads=m["num_key_value_heads"], head_dim=m["head_dim"], v_head_dim=m["head_dim"],
                context_len=m["context_len"], is_hybrid_swa=False, is_multimodal=False,
                full_attention_layer_ids=list(range(m["num_hidden_layers"])), attention_arch="MHA",
                dtype=getattr(torch, m.get("dtype", "bfloat16")), is_hybrid_swa_compress=False,
                swa_attention_layer_ids=[],
            )
            return mc, None, m["num_hidden_layers"]
        if kind == "qwen3_5":
            if not self.exists("sglang.srt.configs.qwen3_5"):
                raise Untestable("this tree has no sglang/srt/configs/qwen3_5.py (Qwen3.5/3.6 config class)")
            q = self.load("sglang.srt.configs.qwen3_5")
            for mod in ("sglang.srt.configs.qwen3_next", "sglang.srt.configs.mamba_utils"):
                self.patch(loader.load(mod))
            text = q.Qwen3_5TextConfig(**m["text_config"])
            hf = View("hf_config", self.reads, architectures=list(m["architectures"]), text_config=text,
                      model_type="qwen3_5")
            object.__setattr__(hf, "get_text_config", lambda *a, **k: text)
            layers = text.full_attention_layer_ids
            mc = ModelConfigView(
                "model_config", self.reads, hf_config=hf, hf_text_config=text,
                num_hidden_layers=text.num_hidden_layers, num_attention_layers=len(layers),
                num_key_value_heads=text.num_key_value_heads, head_dim=text.head_dim, v_head_dim=text.head_dim,
                context_len=m["context_len"], is_hybrid_swa=False, is_multimodal=True,
                full_attention_layer_ids=layers, attention_arch="MHA",
                dtype=getattr(torch, m.get("dtype", "bfloat16")), is_hybrid_swa_compress=False,
                swa_attention_layer_ids=[],
            )
            params = text.mamba2_cache_params
            self.figures["mamba_cache_per_req_bytes"] = int(params.mamba_cache_per_req)
            self.figures["mamba_layers"] = len(params.layers)
            return mc, text, text.num_hidden_layers
        raise Untestable(f"model kind {kind!r} is not one the harness builds (dense, qwen3_5)")

    def runner_attrs(self) -> dict:
        sa = self.server_args()
        self._install_runtime_context(sa)
        mc, mambaish, num_layers = self.model()
        spec = self.spec_algorithm()
        draft = self.req.get("draft") or {}
        self.server_args_view = sa
        self.figures["speculative_num_draft_tokens"] = sa.speculative_num_draft_tokens
        self.figures["max_running_requests_flag"] = sa.max_running_requests
        self.figures["disable_overlap_schedule"] = sa.disable_overlap_schedule
        return dict(
            device="cuda",
            gpu_id=0,
            tp_rank=0,
            tp_size=int(self.req["server"].get("tp_size", 1)),
            pp_rank=0,
            pp_size=1,
            dp_size=1,
            is_draft_worker=False,
            num_effective_layers=num_layers,
            start_layer=0,
            end_layer=num_layers,
            kv_cache_dtype=self.kv_cache_dtype(),
            dtype=mc.dtype,
            use_mla_backend=False,
            mem_fraction_static=float(sa.mem_fraction_static),
            is_hybrid=False,
            is_hybrid_swa=False,
            is_hybrid_swa_compress=False,
            page_size=int(sa.page_size),
            req_to_token_pool=None,
            token_to_kv_pool_allocator=None,
            model=self.weights_module(),
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


def _recorder_class(name: str, ctx: Context):
    """In place of a pool class: records the constructor's arguments."""

    class PoolRecord:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs
            self.size = kwargs.get("size", args[0] if args else None)
            ctx.figures.setdefault("pools", {})[name] = {
                k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool, type(None)))
            } | ({"size": self.size} if self.size is not None else {})

        def __getattr__(self, item):
            if item.startswith("__"):
                raise AttributeError(item)
            return loader.make_stub_class(f"{name}().{item}")

    PoolRecord.__name__ = name
    return PoolRecord


def _install_pool_recorders(mod, ctx: Context) -> None:
    for name, value in list(mod.__dict__.items()):
        if isinstance(value, loader._StubMeta) and value.__stub_name__.startswith("sglang.srt.mem_cache"):
            setattr(mod, name, _recorder_class(name, ctx))


def _make_runner(base, attrs: dict, ctx: Context, shadow: tuple = ()):
    """An instance of a subclass of upstream's class, built without its constructor."""
    ns = {name: None for name in shadow}  # read-only properties upstream computes in __init__
    reads = ctx.reads

    def __getattribute__(self, name):
        if not name.startswith("__"):
            reads.add(f"runner.{name}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise MissingInput("runner", name)

    ns["__getattribute__"] = __getattribute__
    ns["__getattr__"] = __getattr__
    cls = type("HarnessRunner", (base,), ns)
    r = object.__new__(cls)
    for k, v in attrs.items():
        try:
            object.__setattr__(r, k, v)
        except AttributeError:
            pass
    return r


def drive(ctx: Context) -> dict:
    era = ctx.layout.era
    if era == "configurator":
        return _drive_configurator(ctx)
    return _drive_runner(ctx)


def _drive_runner(ctx: Context) -> dict:
    """Eras runner / mixin / mixin-bytes: a ModelRunner-like object and its real methods."""
    mod = ctx.load(ctx.layout.entry)
    _install_pool_recorders(mod, ctx)
    if ctx.layout.era == "runner":
        base = mod.ModelRunner
        shadow = tuple(
            n for n in ("mambaish_config", "hybrid_gdn_config", "mamba2_config", "kimi_linear_config",
                        "is_hybrid_gdn", "qwen3_next_config")
            if isinstance(getattr(base, n, None), property)
        )
    else:
        base = mod.ModelRunnerKVCacheMixin
        shadow = ()
    pool_cfg = None
    if ctx.exists("sglang.srt.model_executor.pool_configurator") and ctx.layout.era == "mixin-bytes":
        pool_cfg = ctx.load("sglang.srt.model_executor.pool_configurator")
        _wrap_configurator_factory(pool_cfg, ctx)
    if ctx.exists("sglang.srt.speculative.dflash_utils"):
        ctx.patch(loader.load("sglang.srt.speculative.dflash_utils"))
    attrs = ctx.runner_attrs()
    r = _make_runner(base, attrs, ctx, shadow)
    _wrap_methods(r, ctx)
    pre = ctx.pre_load
    if hasattr(base, "_resolve_memory_pool_config"):
        cfg = r._resolve_memory_pool_config(pre)
        ctx.figures["max_total_num_tokens"] = cfg.max_total_num_tokens
        ctx.figures["max_running_requests"] = cfg.max_running_requests
        ctx.figures["entry"] = "_resolve_memory_pool_config"
        if ctx.req.get("measure_allocation"):
            from . import allocation

            ctx.figures["allocation"] = allocation.measure(ctx, r, cfg, mod)
    else:
        import inspect

        params = inspect.signature(base.init_memory_pool).parameters
        # v0.5.7-v0.5.8: init_memory_pool(total_gpu_memory, server_args)
        sig_args = (pre, attrs["server_args"]) if "server_args" in params else (pre,)
        r.init_memory_pool(*sig_args)
        tokens = object.__getattribute__(r, "max_total_num_tokens")
        ctx.figures["max_total_num_tokens"] = tokens
        pool = object.__getattribute__(r, "req_to_token_pool")
        size = getattr(pool, "size", None)
        ctx.figures["req_to_token_pool_size"] = size
        # model_runner.py (ModelRunner.initialize), right after init_memory_pool:
        #   self.max_running_requests = min(self.max_total_num_tokens // 2, self.req_to_token_pool.size)
        if size is not None:
            ctx.figures["max_running_requests"] = min(tokens // 2, size)
        ctx.figures["entry"] = "init_memory_pool"
    ctx.figures["max_mamba_cache_size"] = ctx.server_args_view.max_mamba_cache_size if attrs["mambaish_config"] is not None else None
    return ctx.figures


def _wrap_configurator_factory(pool_cfg, ctx: Context) -> None:
    orig = pool_cfg.create_memory_pool_configurator

    def factory(*args, **kwargs):
        c = orig(*args, **kwargs)
        cell = getattr(c, "_cell_size", None)
        if cell is not None:
            ctx.figures["cell_size_bytes"] = int(cell)
        return c

    pool_cfg.create_memory_pool_configurator = factory


def _wrap_methods(r, ctx: Context) -> None:
    """Record what upstream's own steps return, without changing them."""
    cls = type(r)
    for name, key in (
        ("_profile_available_bytes", "available_bytes"),
        ("profile_max_num_token", "profiled_tokens"),
        ("handle_max_mamba_cache", "rest_after_mamba_gib"),
        ("_resolve_max_num_reqs", "resolved_max_num_reqs"),
    ):
        fn = getattr(cls, name, None)
        if fn is None:
            continue

        def wrapper(self, *a, __fn=fn, __key=key, **k):
            out = __fn(self, *a, **k)
            ctx.figures[__key] = out
            if __key == "rest_after_mamba_gib":
                ctx.figures["rest_before_mamba_gib"] = a[0] if a else None
            return out

        setattr(cls, name, wrapper)


def _drive_configurator(ctx: Context) -> dict:
    """Era configurator (v0.5.16+): the real KVCacheConfigurator dataclass.

    Built with ``object.__new__``; its fields are set from the scenario, then
    its own ``__post_init__`` runs.  The runtime-context accessors that v0.5.17+
    read (``get_schedule()``, ``get_memory()`` ...) all return the server-args
    view, whose fields carry the same names.
    """
    for extra in ("sglang.srt.mem_cache.draft_kv_budget", "sglang.srt.configs.hybrid_arch",
                  "sglang.srt.mem_cache.layout.fused_draft"):  # HOST_KINDS registry (v0.5.23)
        if ctx.exists(extra):
            loader.add_real(ctx.finder, extra)
    kmod = ctx.load(ctx.layout.entry)
    _install_pool_recorders(kmod, ctx)
    pool_cfg = ctx.load("sglang.srt.model_executor.pool_configurator")
    _wrap_configurator_factory(pool_cfg, ctx)
    if ctx.exists("sglang.srt.speculative.dflash_utils"):
        ctx.patch(loader.load("sglang.srt.speculative.dflash_utils"))
    attrs = ctx.runner_attrs()
    sa = attrs["server_args"]
    tp = attrs["tp_size"]
    mambaish = attrs["mambaish_config"]
    accessors = ctx.accessors
    model_fakes = {
        "mambaish_config": lambda mc: mambaish,
        "hybrid_gdn_config": lambda mc: mambaish,
        "hybrid_kda_config": lambda mc: None,
    }
    loader.set_fakes(accessors)
    loader.set_fakes(model_fakes)
    for mod in (kmod, pool_cfg):
        for name, fake in {**accessors, **model_fakes}.items():
            if name in mod.__dict__:
                setattr(mod, name, fake)
    draft = ctx.req.get("draft") or {}
    draft_mc = None
    if draft:
        draft_mc = ModelConfigView(
            "draft_model_config", ctx.reads, num_key_value_heads=draft["num_key_value_heads"],
            head_dim=draft["head_dim"], v_head_dim=draft["head_dim"], num_hidden_layers=draft["num_hidden_layers"],
            num_attention_layers=draft["num_hidden_layers"], is_hybrid_swa=False, attention_arch="MHA",
            hf_config=View("draft_hf_config", ctx.reads, architectures=["DFlashDraftModel"],
                           num_hidden_layers=draft["num_hidden_layers"], block_size=draft.get("block_size")),
        )
    mc = attrs["model_config"]
    layer_ids = list(mc.full_attention_layer_ids)
    values = dict(attrs)
    values.update(
        ps=View("ps", ctx.reads, attn_dp_size=1, attn_tp_size=tp, attn_cp_size=1, attn_dcp_size=1, pp_size=1,
                tp_size=tp, moe_dp_size=1),
        pp_group=None,
        model_dtype=mc.dtype,
        post_capture_kv_active=False,
        spec_aux_config=View("spec_aux_config", ctx.reads, dflash_draft_num_layers=attrs["dflash_draft_num_layers"],
                             draft_model_config=draft_mc if attrs["dflash_draft_num_layers"] else None),
        layer_info=View("layer_info", ctx.reads, start_layer=0, end_layer=attrs["end_layer"],
                        num_effective_layers=attrs["num_effective_layers"], full_attention_layer_ids=layer_ids,
                        swa_attention_layer_ids=[], is_hybrid_swa_mtp_draft=False,
                        num_attention_layers=len(layer_ids)),
        forward_stream=None,
        memory_pool_config=None,
        draft_model_idx=None,
        attn_dp_size=1,
        draft_parallel_layout=None,
        dflash_draft_cell_size_per_token=None,
        kv_cache_dtype_str=ctx.req["server"].get("kv_cache_dtype", "auto"),
        extra_mamba_cache_bytes_per_req=0,
        hybrid_kda_config=None,
        kv_shard_rank=None,
        kv_shard_size=1,
        kv_shard_spec=None,
        kv_shard_group=None,
        is_hybrid_swa_mtp_draft=False,
        draft_swa_full_capacity=False,
        is_inkling_mtp_draft=False,
    )
    cls = kmod.KVCacheConfigurator
    kvc = object.__new__(cls)
    missing = []
    for f in dataclasses.fields(cls):
        if f.name in values:
            object.__setattr__(kvc, f.name, values[f.name])
        elif f.default is not dataclasses.MISSING:
            object.__setattr__(kvc, f.name, f.default)
        else:
            missing.append(f.name)
    if missing:
        raise MissingInput("KVCacheConfigurator", ", ".join(missing))
    if hasattr(cls, "__post_init__"):
        kvc.__post_init__()
    for name, key in (("_profile_available_bytes", "available_bytes"),
                      ("_handle_max_mamba_cache", "rest_after_mamba_gib"),
                      ("resolve_max_num_reqs", "resolved_max_num_reqs")):
        fn = getattr(cls, name, None)
        if fn is None:
            continue

        def wrapper(*a, __fn=fn, __key=key, **k):
            out = __fn(kvc, *a, **k)
            ctx.figures[__key] = out
            return out

        try:
            object.__setattr__(kvc, name, wrapper)
        except AttributeError:  # slots: no per-instance override; figures come from the config
            pass
    cfg = kvc._resolve_memory_pool_config(ctx.pre_load)
    ctx.figures["max_total_num_tokens"] = cfg.max_total_num_tokens
    ctx.figures["max_running_requests"] = cfg.max_running_requests
    ctx.figures["entry"] = "KVCacheConfigurator._resolve_memory_pool_config"
    ctx.figures["max_mamba_cache_size"] = sa.max_mamba_cache_size if mambaish is not None else None
    return ctx.figures
