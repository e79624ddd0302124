"""SGLang's own server flags, parsed by the release's own ``ServerArgs.add_cli_args``.

The parse runs in the harness's child interpreter (``python -m sgl_overlay.harness.child``,
a request of ``Job.FLAGS``, the result a ``protocol.FlagsResult``), in the child's
import environment (``setup.import_environment``), behind the harness's targeted
loader: the tree's ``server_args`` module (and, from v0.5.16, its
``arg_groups`` package, where the flag tables moved) is executed for real,
every other ``sglang.*`` module is an inert stand-in.

What a stand-in cannot supply is dropped from the argument *declaration*, not
invented: a ``choices`` list, ``type`` or ``action`` that is a stand-in (for
example ``--max-prefill-tokens``' ``human_readable_int`` in a module not under
test) is left out, and ``parse_flags`` reports each dropped item.  Flags the
release does not declare are rejected by argparse itself.

Only the flags given on the command line are returned (a field whose parsed
value differs from the value parsed from no flags), keyed by ServerArgs field.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..flag_renames import renamed
from ..protocol import FlagsFailure, FlagsResult
from . import loader
from .release_parser import FlagError, build
from .setup import arg_group_modules, import_environment


def _modules(root: Path) -> list[str]:
    # v0.5.13+: the flag declarations live in arg_groups (v0.5.16+: add_cli_args_from_dataclass)
    return ["sglang.srt.server_args", *arg_group_modules(root)]


def flag_hints(argv: list[str], options: list[str]) -> list[str]:
    """For each flag of ``argv`` the release does not declare: the flag it was renamed to
    (``flag_renames.RENAMES``, with its source), else the declared flags most like it."""
    import difflib

    hints = []
    for tok in argv:
        flag = tok.split("=")[0]
        if not tok.startswith("--") or flag in options:
            continue
        rename = renamed(flag)
        if rename is not None and rename.new_flag in options:
            hints.append(f"{flag}: {rename.remedy()}")
            continue
        close = difflib.get_close_matches(flag, options, n=3, cutoff=0.7)
        hints.append(f"{flag}: " + (f"did you mean {', '.join(close)}?" if close else "no similar flag"))
    return hints


def parse(root: Path, argv: list[str]) -> FlagsResult:
    """The ServerArgs fields ``argv`` sets on the tree at ``root``, or why there are none."""
    with import_environment(root, _modules(root)):
        try:
            return _parse(root, argv)
        except Exception as e:  # noqa: BLE001
            return FlagsResult(failure=FlagsFailure.UNSUPPORTED, error=f"{type(e).__name__}: {e}")


def _parse(root: Path, argv: list[str]) -> FlagsResult:
    try:
        sa = loader.load("sglang.srt.server_args")
    except Exception as e:  # noqa: BLE001
        return FlagsResult(failure=FlagsFailure.UNSUPPORTED,
                           error=f"the release's sglang/srt/server_args.py does not load with stand-ins "
                                 f"({type(e).__name__}: {e})")
    for k, v in list(sa.__dict__.items()):  # constant tables from modules not under test
        if loader.is_stub(v) and k.isupper():
            sa.__dict__[k] = []
    try:
        rp = build(root, sa.ServerArgs)
    except Exception as e:  # noqa: BLE001
        return FlagsResult(failure=FlagsFailure.UNSUPPORTED,
                           error=f"the release's ServerArgs.add_cli_args does not run with stand-ins "
                                 f"({type(e).__name__}: {e})")
    options = rp.options
    try:
        base = rp.parse([])
        given = rp.parse(list(argv))
    except FlagError as e:
        return FlagsResult(failure=FlagsFailure.FLAG, error=str(e), hints=flag_hints(argv, options),
                           known_flags=len(options))
    note = None
    try:
        # The release's own from_cli_args (argparse dests -> ServerArgs fields, e.g.
        # --tp-size's tensor_parallel_size -> tp_size), with __post_init__ (GPU
        # detection, model loading) not run.
        cls = sa.ServerArgs
        cls.__post_init__ = lambda self, *a, **k: None

        def as_fields(ns: dict) -> dict:
            obj = cls.from_cli_args(argparse.Namespace(**ns))
            return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(cls)}

        base, given = as_fields(base), as_fields(given)
    except Exception as e:  # noqa: BLE001
        note = f"ServerArgs.from_cli_args did not run ({type(e).__name__}: {e}); argparse names used"
    explicit = {k: v for k, v in given.items() if k != "model_path" and base.get(k) != v}
    return FlagsResult(fields=explicit, dropped=rp.dropped, known_flags=len(options), note=note)
