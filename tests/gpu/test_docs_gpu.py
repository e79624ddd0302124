"""docs/gpu.md's options tables name exactly the options of each GPU tool's own argparse parser
(and of each subcommand's), in the page's order, and the page has one exit-code table: the rule
tests/env/test_docs_options.py keeps for the library's tools, applied to the package tools.gpu."""
import argparse
import importlib

import pytest

from tests.env.test_docs_options import ROOT, parser_options, tables_of

PAGE = ROOT / "docs" / "gpu.md"
# the page's options tables, in order: (module of tools.gpu, subcommand or None)
TABLES = [("pre_gap_check", None), ("e2e", None), ("e2e_plan", None), ("verify_cost", None),
          ("gdn_float32_check", None), ("ddtree_check", None), ("ddtree_hybrid_kernel_check", None),
          ("spec_value.cli", "prepare"), ("spec_value.cli", "run"), ("spec_value.cli", "merge"),
          ("spec_value.cli", "chain-batch"), ("spec_value.cli", "project"), ("spec_drafter", "train")]


class _Caught(Exception):
    def __init__(self, parser):
        super().__init__("parser caught")
        self.parser = parser


def parser_of(module, sub, monkeypatch):
    """The parser `python3 -m tools.gpu.MODULE` builds (caught at parse_args, before it parses), or
    its subcommand's."""
    def catch(self, args=None, namespace=None):
        raise _Caught(self)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    mod = importlib.import_module(f"tools.gpu.{module}")
    with pytest.raises(_Caught) as caught:
        mod.main()
    parser = caught.value.parser
    if sub is None:
        return parser
    (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subs.choices[sub]


@pytest.mark.parametrize("index,module,sub", [(i, m, s) for i, (m, s) in enumerate(TABLES)],
                         ids=[f"{m}:{s}" if s else m for m, s in TABLES])
def test_options_table_equals_the_parser(index, module, sub, monkeypatch):
    tables = tables_of(PAGE.read_text())
    assert len(tables) == len(TABLES), f"{PAGE}: {len(tables)} options tables, expected {len(TABLES)}"
    real = parser_options(parser_of(module, sub, monkeypatch))
    documented = tables[index]
    assert documented == real, (f"docs/gpu.md ({module} {sub or ''}): missing from the page {sorted(real - documented)}, "
                                f"not options of the tool {sorted(documented - real)}")


def test_one_exit_table():
    headers = [line for line in PAGE.read_text().splitlines() if line.startswith("| exit |")]
    assert len(headers) == 1
