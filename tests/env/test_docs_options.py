"""Each tool page's options table names exactly the options of the tool's own
argparse parser, so the table cannot drift from the code; each reference page
has one exit-code table.

The parser is the one the command builds: its ``main`` is called and the
parser is caught at ``parse_args``, before it parses anything.  A table is
the Markdown table whose header row is ``| option | meaning | default |``;
its first cell names the option's strings in backquotes, each maybe with its
value (`-q`, `--quiet`; `--wait SECONDS`), or a positional argument in
capitals (`MODEL`).  Options hidden from
``--help`` (``help=argparse.SUPPRESS``) and ``-h/--help`` itself are not in
the tables."""
import argparse
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HEADER = re.compile(r"^\|\s*option\s*\|\s*meaning\s*\|\s*default\s*\|\s*$")
TOKEN = re.compile(r"`([^`]+)`")

# page -> the commands whose options tables it holds, in the order of its tables
PAGES = {
    "docs/apply.md": ["apply"],
    "docs/bisect.md": ["bisect"],
    "docs/plan.md": ["plan"],
    "docs/bundle.md": ["bundle", "imports"],
    "docs/regress.md": ["regress"],
    # a command with verbs: "stack *" the options every verb takes, "stack VERB" that verb's own
    "docs/stack.md": ["stack *", "stack rebase", "stack check", "stack port", "stack refresh", "stack export",
                      "stack roll", "stack lint"],
}


class _Caught(Exception):
    def __init__(self, parser):
        super().__init__("parser caught")
        self.parser = parser


def parser_of(command, monkeypatch):
    """The ArgumentParser that ``sgl-overlay COMMAND`` builds."""
    def catch(self, args=None, namespace=None):
        raise _Caught(self)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    module = importlib.import_module(f"sgl_overlay.commands.{command}")
    with pytest.raises(_Caught) as caught:
        module.main([])
    return caught.value.parser


def parser_options(parser):
    """The option strings and positional names ``--help`` shows."""
    names = set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            names.update(action.option_strings)
        else:
            names.add(action.metavar or action.dest.upper())
    return names


def command_options(spec, monkeypatch):
    """The options of ``spec``: a command (``regress``), or one verb of a
    command with verbs (``stack port``: the options of that verb's parser
    less those every verb takes), or ``stack *`` (those every verb takes)."""
    command, _, verb = spec.partition(" ")
    parser = parser_of(command, monkeypatch)
    if not verb:
        return parser_options(parser)
    verbs = {name: parser_options(p) for action in parser._actions
             if isinstance(action, argparse._SubParsersAction) for name, p in action.choices.items()}
    every = set.intersection(*verbs.values())
    return every if verb == "*" else verbs[verb] - every


NAME = re.compile(r"--?[A-Za-z0-9][\w-]*|[A-Z][A-Z_]*")


def tables_of(text):
    """Each options table of a page's text: the set of names in its first column."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        if not HEADER.match(line):
            continue
        names = set()
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            for token in TOKEN.findall(row.split("|")[1]):
                first = token.split()[0] if token.split() else ""
                if NAME.fullmatch(first):
                    names.add(first)
        tables.append(names)
    return tables


CASES = [(page, i, command) for page, commands in PAGES.items() for i, command in enumerate(commands)]


@pytest.mark.parametrize("page,index,command", CASES, ids=[f"{p}:{c}" for p, _, c in CASES])
def test_options_table_equals_the_parser(page, index, command, monkeypatch):
    tables = tables_of((ROOT / page).read_text())
    assert len(tables) == len(PAGES[page]), f"{page}: {len(tables)} options tables, expected one per command"
    documented = tables[index]
    real = command_options(command, monkeypatch)
    assert documented == real, (f"{page} (sgl-overlay {command}): missing from the page {sorted(real - documented)}, "
                                f"not options of the tool {sorted(documented - real)}")


def test_a_missing_option_is_caught(monkeypatch):
    """The check fails for a table without one of the parser's options."""
    real = parser_options(parser_of("regress", monkeypatch))
    assert "--no-remedy" in real
    lines = (ROOT / "docs/regress.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if HEADER.match(line))
    row = next(i for i in range(header, len(lines)) if lines[i].startswith("| `--no-remedy`"))
    shorter = "\n".join(lines[:row] + lines[row + 1:])
    (documented,) = tables_of(shorter)
    assert real - documented == {"--no-remedy"}


# the reference pages that each hold one exit-code table (a header row that starts `| exit |`)
EXIT_PAGES = ["docs/apply.md", "docs/bisect.md", "docs/plan.md", "docs/bundle.md", "docs/regress.md",
              "docs/scenarios.md", "docs/lock.md", "docs/checkouts.md", "docs/stack.md"]


@pytest.mark.parametrize("page", EXIT_PAGES)
def test_one_exit_table(page):
    headers = [line for line in (ROOT / page).read_text().splitlines() if re.match(r"^\|\s*exit\s*\|", line)]
    assert len(headers) == 1, f"{page}: {len(headers)} exit-code tables, expected one"
