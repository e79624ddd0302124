"""Eras runner / mixin / mixin-bytes (up to v0.5.15): a ModelRunner-like
object built without its constructor, and its real methods."""

from __future__ import annotations

from ...layout import Era
from ..standins import MissingInput
from .context import Context
from .inputs import runner_inputs
from .recorders import _install_pool_recorders, _wrap_configurator_factory


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
    """Eras runner / mixin / mixin-bytes: a ModelRunner-like object and its real methods."""
    mod = ctx.load(ctx.layout.entry)
    _install_pool_recorders(mod, ctx)
    if ctx.layout.era is Era.RUNNER:
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
    if ctx.exists("sglang.srt.model_executor.pool_configurator") and ctx.layout.era is Era.MIXIN_BYTES:
        pool_cfg = ctx.load("sglang.srt.model_executor.pool_configurator")
        _wrap_configurator_factory(pool_cfg, ctx)
    inputs = runner_inputs(ctx)
    attrs = inputs.attrs
    r = _make_runner(base, attrs, ctx, shadow)
    _wrap_methods(r, ctx)
    pre = ctx.pre_load
    if hasattr(base, "_resolve_memory_pool_config"):
        cfg = r._resolve_memory_pool_config(pre)
        ctx.figures["max_total_num_tokens"] = cfg.max_total_num_tokens
        ctx.figures["max_running_requests"] = cfg.max_running_requests
        ctx.figures["entry"] = "_resolve_memory_pool_config"
        if ctx.req.get("measure_allocation"):
            from .. import allocation

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
    ctx.figures["max_mamba_cache_size"] = inputs.server_args.max_mamba_cache_size if attrs["mambaish_config"] is not None else None
    return ctx.figures


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
