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


# Pure functions of the (stubbed) pool modules that the sizing calls for a decision: run from the
# tree's own source, not recorded.  conv_window_dedup_enabled (memory_pool.py, v0.5.14+): whether
# MambaPool deduplicates the speculative conv windows, which the stack's sizing mirrors
# (memory-reserve-the-speculative-conv-windows.patch); a recorder there is truthy for every
# algorithm, DDTREE's tree verify included.
POOL_PURE_FUNCTIONS = ("conv_window_dedup_enabled",)


def _real_function(ctx: Context, stub_name: str):
    """The function ``stub_name`` (``package.module.function``) compiled from the tree's own
    source file alone (its module-level names are not needed: typing's are given)."""
    import ast
    import typing

    module, _, func = stub_name.rpartition(".")
    path = ctx.root.joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
    ns = {k: getattr(typing, k) for k in typing.__all__}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), ns)  # noqa: S102 - the tree's own code
    return ns[func]


def _install_pool_recorders(mod, ctx: Context) -> None:
    for name, value in list(mod.__dict__.items()):
        if isinstance(value, loader._StubMeta) and value.__stub_name__.startswith("sglang.srt.mem_cache"):
            if name in POOL_PURE_FUNCTIONS:
                setattr(mod, name, _real_function(ctx, value.__stub_name__))
            else:
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
