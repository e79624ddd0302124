"""Drive the real upstream sizing code of one tree, in this interpreter.

Runs inside the child interpreter (``child.py``).  One driver per layout era
(``runner``: runner / mixin / mixin-bytes; ``configurator``: v0.5.16+); they
share the context (``context``), the inputs computed from it (``inputs``:
server args, model config, GPU stand-ins) and the pool recorders
(``recorders``).  Each returns a dict of recorded figures; exceptions
propagate to the child, which classifies them.
"""

from __future__ import annotations

from .configurator import _drive_configurator
from .context import Context, Untestable
from .defaults import KV_DTYPES
from .inputs import RunnerInputs, runner_inputs
from .runner import _drive_runner

__all__ = ["KV_DTYPES", "Context", "RunnerInputs",
           "Untestable", "drive", "runner_inputs"]


def drive(ctx: Context) -> dict:
    era = ctx.layout.era
    if era == "configurator":
        return _drive_configurator(ctx)
    return _drive_runner(ctx)
