"""What both driver families record: pool classes replaced by recorders of
their constructor's arguments, and the pool configurator's cell size."""

from __future__ import annotations

from .. import loader
from .context import Context


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


def _wrap_configurator_factory(pool_cfg, ctx: Context) -> None:
    orig = pool_cfg.create_memory_pool_configurator

    def factory(*args, **kwargs):
        c = orig(*args, **kwargs)
        cell = getattr(c, "_cell_size", None)
        if cell is not None:
            ctx.figures["cell_size_bytes"] = int(cell)
        return c

    pool_cfg.create_memory_pool_configurator = factory
