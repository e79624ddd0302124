"""Where a start-up log's free-memory readings differ from the ones SGLang sizes against.

The sizing takes two readings of free GPU memory: ``pre_model_load_memory``, returned by
``ModelRunner.init_torch_distributed`` (the minimum over the ranks), and the post-load reading
inside the profiling step (``_profile_available_bytes``; the patched tree's
``free_memory_per_rank``).  A log prints two others: "Load weight begin. avail mem" and
"Load weight end. avail mem" (``load_model``).  The gaps between them are measured on a GPU
(the probe of tools/gpu records every reading, in order: tests/data/gpu_results/*/free_readings.json)
and bound where the sizing's readings lie around the logged ones (docs/results/regress.md, "Public
start-up logs").  The post-load gap has a part the release's code fixes for each model and
context, the RoPE pre-expansion after "Load weight end" (``rope_reserve``): it is taken out
of each measured start (``gaps_of_start``'s ``rope_bytes``), so what is left is what the code
does not show (nothing, on the starts measured).

These are the measurements the readings model rests on (``readings``: the H200's stream pool,
``STREAM_POOL_MEASURED``); the model itself, which the harness and the planner apply to a log's
readings, is ``readings.derive``.  Used by tools/gpu/e2e_plan.py and the tests (tests/regress)."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
SIZING_CALLERS = ("_profile_available_bytes", "free_memory_per_rank")


class ReadingsError(ValueError):
    """A start's readings lack one the gaps need."""


@dataclass(frozen=True)
class Gaps:
    """Bytes, (least, most) over the measured starts.  ``pre``: the sizing's pre-load reading
    minus the logged "Load weight begin" one.  ``post``: the logged "Load weight end" reading
    minus the sizing's post-load one, less the start's RoPE pre-expansion (the rest)."""

    pre: tuple[int, int]
    post: tuple[int, int]
    starts: int


def _target(readings: list[dict], caller) -> list[int]:
    """The target worker's readings (``draft`` False) by ``caller`` (a name or a tuple), in order."""
    names = (caller,) if isinstance(caller, str) else caller
    return [r["bytes"] for r in readings if r.get("draft") is False and r["caller"] in names]


def sizing_readings(readings: list[dict]) -> tuple[int | None, int | None]:
    """(pre, post) bytes the sizing itself uses, from a start's readings in order (``caller``,
    ``bytes``, ``draft``): ``pre_model_load_memory``, ``init_torch_distributed``'s second reading
    (its first, ``before_avail_memory``, is taken ahead of the process groups), and the sizing's
    own post-load reading; None where the start lacks one."""
    dist = _target(readings, "init_torch_distributed")
    sizing = _target(readings, SIZING_CALLERS)
    return (dist[1] if len(dist) > 1 else None), (sizing[0] if sizing else None)


def gaps_of_start(readings: list[dict], rope_bytes: int = 0) -> tuple[int, int]:
    """(pre gap, post gap) in bytes of one start, from its readings in order (``caller``,
    ``bytes``, ``draft``): the sizing's readings (``sizing_readings``) against load_model's
    logged begin and end; the post gap less ``rope_bytes``, the start's RoPE pre-expansion.
    ``init_torch_distributed``'s readings after its first are ``pre_model_load_memory`` and
    the local reading, equal on one GPU (checked)."""
    dist = _target(readings, "init_torch_distributed")[1:]
    load = _target(readings, "load_model")
    sizing = _target(readings, SIZING_CALLERS)
    if not dist or len(load) < 2 or not sizing:
        raise ReadingsError("a start needs init_torch_distributed's pre-load reading, load_model's begin and "
                            f"end readings and the sizing's own ({' or '.join(SIZING_CALLERS)})")
    if len(set(dist)) != 1:
        raise ReadingsError(f"init_torch_distributed's pre-load readings differ ({dist}): not a one-GPU start")
    return dist[0] - load[0], load[-1] - sizing[0] - rope_bytes


def measured_gaps(starts: list[list[dict]], rope_bytes: list[int] | None = None) -> Gaps:
    """The gaps over ``starts`` (each a start's readings), ``rope_bytes`` the RoPE
    pre-expansion of each (``rope_reserve.scenario_expansion_bytes``; none when omitted)."""
    ropes = rope_bytes if rope_bytes is not None else [0] * len(starts)
    if len(ropes) != len(starts):
        raise ReadingsError(f"{len(starts)} starts but {len(ropes)} RoPE expansions")
    pairs = [gaps_of_start(s, r) for s, r in zip(starts, ropes)]
    if not pairs:
        raise ReadingsError("no start to measure")
    pre, post = zip(*pairs)
    return Gaps(pre=(min(pre), max(pre)), post=(min(post), max(post)), starts=len(pairs))
