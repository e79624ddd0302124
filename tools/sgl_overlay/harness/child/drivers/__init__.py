"""Drive the real upstream sizing code of one tree, in this interpreter.

Runs inside the child interpreter (``harness/child``).  One driver per layout era, the era's
``Era.driver`` (``runner``: runner / mixin / mixin-bytes; ``configurator``: v0.5.16+), each
module's ``drive``; they
share the context (``context``), the inputs computed from it (``inputs``:
server args, model config, GPU stand-ins) and the pool recorders
(``recorders``).  Each returns a dict of recorded figures; exceptions
propagate to the child, which classifies them.
"""

from __future__ import annotations

from importlib import import_module

from .context import Context, Untestable
from .defaults import KV_DTYPES
from .inputs import RunnerInputs, runner_inputs

__all__ = ["KV_DTYPES", "Context", "RunnerInputs",
           "Untestable", "drive", "runner_inputs"]


def drive(ctx: Context) -> dict:
    """The figures of the context's tree, by its era's driver."""
    return import_module(f"{__name__}.{ctx.layout.era.driver.value}").drive(ctx)
