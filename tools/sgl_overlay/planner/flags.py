"""SGLang's own server flags, parsed by the release's own ``ServerArgs.add_cli_args``.

The parse runs in a fresh interpreter (``python -m sgl_overlay.planner.flags``,
request JSON on stdin, result JSON on stdout), behind the harness's targeted
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

import json
import sys

from ..harness.flag_renames import renamed
from ..harness.release_parser import FlagError, build


def _modules(root) -> list[str]:
    mods = ["sglang.srt.server_args"]
    ag = root / "sglang" / "srt" / "arg_groups"
    if ag.is_dir():  # v0.5.13+: the flag declarations live here (v0.5.16+: add_cli_args_from_dataclass)
        for p in sorted(ag.rglob("*.py")):
            name = ".".join(p.relative_to(root).with_suffix("").parts)
            mods.append(name.removesuffix(".__init__"))
    return mods


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


def parse_in_child(root_s: str, argv: list[str]) -> dict:
    """Runs in the child interpreter."""
    import argparse
    from pathlib import Path

    from ..harness import loader
    from ..harness.standins import install_transformers_standin, install_triton_standin

    root = Path(root_s)
    install_transformers_standin()
    install_triton_standin()
    loader.install(root, _modules(root))
    try:
        sa = loader.load("sglang.srt.server_args")
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "kind": "unsupported",
                "error": f"the release's sglang/srt/server_args.py does not load with stand-ins "
                f"({type(e).__name__}: {e})"}
    for k, v in list(sa.__dict__.items()):  # constant tables from modules not under test
        if loader.is_stub(v) and k.isupper():
            sa.__dict__[k] = []
    try:
        rp = build(root, sa.ServerArgs)
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "kind": "unsupported",
                "error": f"the release's ServerArgs.add_cli_args does not run with stand-ins "
                f"({type(e).__name__}: {e})"}
    options = rp.options
    try:
        base = rp.parse([])
        given = rp.parse(list(argv))
    except FlagError as e:
        return {"ok": False, "kind": "flag", "error": str(e), "hints": flag_hints(argv, options),
                "known_flags": len(options)}
    note = None
    try:
        # The release's own from_cli_args (argparse dests -> ServerArgs fields, e.g.
        # --tp-size's tensor_parallel_size -> tp_size), with __post_init__ (GPU
        # detection, model loading) not run.
        import dataclasses

        cls = sa.ServerArgs
        cls.__post_init__ = lambda self, *a, **k: None

        def as_fields(ns: dict) -> dict:
            obj = cls.from_cli_args(argparse.Namespace(**ns))
            return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(cls)}

        base, given = as_fields(base), as_fields(given)
    except Exception as e:  # noqa: BLE001
        note = f"ServerArgs.from_cli_args did not run ({type(e).__name__}: {e}); argparse names used"
    explicit = {k: v for k, v in given.items() if k != "model_path" and base.get(k) != v}
    return {"ok": True, "fields": explicit, "dropped": rp.dropped, "known_flags": len(options),
            "note": note}


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr  # upstream prints (deprecation notes) go to stderr
    req = json.load(sys.stdin)
    try:
        result = parse_in_child(req["root"], req["argv"])
    except Exception as e:  # noqa: BLE001
        result = {"ok": False, "kind": "unsupported", "error": f"{type(e).__name__}: {e}"}
    out.write(json.dumps(result, default=repr) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
