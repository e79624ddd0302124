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

# argparse keywords; anything else belongs to an upstream Action subclass
_ARGPARSE_KW = {"action", "nargs", "const", "default", "type", "choices", "required", "help", "metavar",
                "dest", "version"}


class FlagError(Exception):
    pass


def _modules(root) -> list[str]:
    mods = ["sglang.srt.server_args"]
    ag = root / "sglang" / "srt" / "arg_groups"
    if ag.is_dir():  # v0.5.13+: the flag declarations live here (v0.5.16+: add_cli_args_from_dataclass)
        for p in sorted(ag.rglob("*.py")):
            name = ".".join(p.relative_to(root).with_suffix("").parts)
            mods.append(name.removesuffix(".__init__"))
    return mods


def _plain(value: str):
    """A value whose declared type converter is not loadable: int, float, else the string."""
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    return value


def _tree_function(root, stub_name: str):
    """A small, self-contained converter from the tree (e.g. utils.common.human_readable_int),
    compiled from its own source, or None."""
    import argparse
    import ast
    import decimal
    import re

    module, _, name = stub_name.rpartition(".")
    if not module.startswith("sglang.") or not name.isidentifier():
        return None
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            ns = {"re": re, "argparse": argparse, "json": json, "Decimal": decimal.Decimal,
                  "InvalidOperation": decimal.InvalidOperation}
            try:
                exec(compile(ast.Module([node], []), str(path), "exec"), ns)  # noqa: S102
            except Exception:  # noqa: BLE001
                return None
            return ns[name]
    return None


def parse_in_child(root_s: str, argv: list[str]) -> dict:
    """Runs in the child interpreter."""
    import argparse
    import difflib
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
    dropped: list[str] = []

    class Parser(argparse.ArgumentParser):
        def add_argument(self, *a, **kw):
            flag = a[0] if a else kw.get("dest", "?")
            for key in ("choices", "nargs", "type", "default", "action", "const"):
                if key in kw and loader.is_stub(kw[key]):
                    stub = kw.pop(key)
                    if key == "type":
                        conv = _tree_function(root, getattr(stub, "__stub_name__", ""))
                        kw["type"] = conv or _plain
                        dropped.append(f"{flag} type: " + ("the tree's own " + conv.__name__ if conv
                                                           else "stand-in; parsed as a plain number or string"))
                        continue
                    dropped.append(f"{flag} {key}")
            if "choices" in kw and kw["choices"] is not None:
                try:
                    if any(loader.is_stub(c) for c in kw["choices"]) or len(list(kw["choices"])) == 0:
                        kw.pop("choices")
                        dropped.append(f"{flag} choices")
                except TypeError:
                    kw.pop("choices")
                    dropped.append(f"{flag} choices")
            for key in list(kw):
                if key not in _ARGPARSE_KW:
                    kw.pop(key)
            if kw.get("action") is None:
                kw.pop("action", None)
            return super().add_argument(*a, **kw)

        def error(self, message):
            raise FlagError(message)

        def exit(self, status=0, message=None):
            raise FlagError(message or f"argparse exit {status}")

    p = Parser(prog="sglang", add_help=False)
    try:
        sa.ServerArgs.add_cli_args(p)
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "kind": "unsupported",
                "error": f"the release's ServerArgs.add_cli_args does not run with stand-ins "
                f"({type(e).__name__}: {e})"}
    options = sorted(o for a in p._actions for o in a.option_strings if o.startswith("--"))
    base_argv = ["--model-path", "MODEL"]
    try:
        base = vars(p.parse_args(base_argv))
        given = vars(p.parse_args(base_argv + list(argv)))
    except FlagError as e:
        msg = str(e)
        hints = []
        for tok in argv:
            if tok.startswith("--") and tok.split("=")[0] not in options:
                close = difflib.get_close_matches(tok.split("=")[0], options, n=3, cutoff=0.7)
                hints.append(f"{tok.split('=')[0]}: " + (f"did you mean {', '.join(close)}?" if close
                                                        else "no similar flag"))
        return {"ok": False, "kind": "flag", "error": msg, "hints": hints, "known_flags": len(options)}
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
    return {"ok": True, "fields": explicit, "dropped": dropped, "known_flags": len(options),
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
