"""A release's own command-line parser: its ``ServerArgs.add_cli_args`` run on an ``argparse`` parser
behind the harness's targeted loader (``sglang.srt.server_args`` and, from v0.5.13, ``arg_groups``
real; every other ``sglang.*`` module an inert stand-in).  The planner parses the user's flags with it
(``child/flags.py``), the harness resolves a scenario's ``[server]`` keys that are not fields of the
release's ``ServerArgs`` with it (``resolution.py``): what the release's parser refuses is refused,
with its own message.

What a stand-in cannot supply is dropped from the argument *declaration*, not invented: a ``choices``
list, ``type`` or ``action`` that is a stand-in (for example ``--max-prefill-tokens``'
``human_readable_int`` in a module not under test) is left out, and each dropped item is reported.
Flags the release does not declare are rejected by argparse itself."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from . import loader

# argparse keywords; anything else belongs to an upstream Action subclass
_ARGPARSE_KW = {"action", "nargs", "const", "default", "type", "choices", "required", "help", "metavar",
                "dest", "version"}
# the base argv every parse starts from (the release requires --model-path)
BASE_ARGV = ("--model-path", "MODEL")


class FlagError(Exception):
    """The release's parser refused the arguments (argparse's own message)."""


def _plain(value: str):
    """A value whose declared type converter is not loadable: int, float, else the string."""
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    return value


def _tree_function(root: Path, stub_name: str):
    """A small, self-contained converter from the tree (e.g. utils.common.human_readable_int),
    compiled from its own source, or None."""
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


@dataclass
class ReleaseParser:
    """The release's parser, the declaration items dropped for stand-ins, and its ``--`` options."""

    parser: argparse.ArgumentParser
    dropped: list[str]

    @property
    def options(self) -> list[str]:
        return sorted(o for a in self.parser._actions for o in a.option_strings if o.startswith("--"))

    def parse(self, argv) -> dict:
        """argparse's namespace for ``BASE_ARGV + argv``; FlagError with the release's message."""
        return vars(self.parser.parse_args([*BASE_ARGV, *argv]))

    def dest_of(self, flag: str) -> str | None:
        """The namespace name the release's parser stores ``flag`` under (an alias's is the new field)."""
        return next((a.dest for a in self.parser._actions if flag in a.option_strings), None)


def build(root: Path, server_args_cls) -> ReleaseParser:
    """``server_args_cls.add_cli_args`` on a parser that drops stand-in declaration items and raises
    FlagError where argparse would print its error and exit."""
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

    # the prog of the release's own prepare_server_args ("sglang serve: error: ...")
    p = Parser(prog="sglang serve", add_help=False)
    server_args_cls.add_cli_args(p)
    return ReleaseParser(p, dropped)


def argv_of(key: str, value) -> list[str]:
    """A scenario's ``[server] key = value`` as the command line gives it (``true``: the flag alone)."""
    flag = "--" + key.replace("_", "-")
    if value is True:
        return [flag]
    if isinstance(value, list):
        return [flag, *map(str, value)]
    return [flag, str(value)]
