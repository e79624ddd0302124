"""A scenario's [server] keys and the planner's flags are taken as the release's own parser takes them
(issue 40, item 3): v0.5.23 dropped --mamba-scheduler-strategy (only --mamba-radix-cache-strategy is
declared) and --cuda-graph-max-bs (a prefix of --cuda-graph-max-bs-decode and -prefill there); the pin,
v0.5.17, takes both as deprecated aliases of the new fields.  Before this, the harness renamed the key
itself and ran v0.5.23 "ok" with the new flag's figures."""

import subprocess
import sys
from pathlib import Path

import pytest

from sgl_overlay.errors import UsageError
from sgl_overlay.harness import Outcome, load_scenario, run_scenario
from sgl_overlay.harness.flag_renames import RENAMES, renamed, respell
from sgl_overlay.planner import core

ROOT = Path(__file__).resolve().parents[2]


def _declares(tree: Path, flag: str) -> bool:
    files = [tree / "sglang/srt/server_args.py", *(tree / "sglang/srt/arg_groups").rglob("*.py")]
    return any(f'"{flag}"' in p.read_text(encoding="utf-8") for p in files if p.is_file())


def test_the_renames_are_the_releases_own(release_tree):
    """Each rename's sources, checked: the release it names as aliasing declares the old flag and the
    new one; the release it names as refusing declares the new one only."""
    for r in RENAMES:
        aliasing, refusing = release_tree(r.aliased.lstrip("v")), release_tree(r.refused.lstrip("v"))
        assert _declares(aliasing, r.old_flag) and "DeprecatedAliasStoreAction" in (
            aliasing / "sglang/srt/server_args.py").read_text(), r
        assert not _declares(refusing, r.old_flag), r
    assert renamed("--mamba-scheduler-strategy").new == "mamba_radix_cache_strategy"
    assert respell({"mamba_scheduler_strategy": "no_buffer", "tp_size": 1}) == {
        "mamba_radix_cache_strategy": "no_buffer", "tp_size": 1}


def test_v0_5_23_refuses_the_old_flag_with_its_message_and_the_remedy(release_tree):
    report = run_scenario(release_tree("0.5.23"), load_scenario("dflash-smoke"), verify_remedy=False)
    assert report.outcome is Outcome.UNTESTABLE and report.result.exit_code == 125, report.reason
    assert ("SGLang v0.5.23's own parser refuses [server] mamba_scheduler_strategy "
            "(--mamba-scheduler-strategy no_buffer): \"unrecognized arguments: --mamba-scheduler-strategy "
            "no_buffer\"; use --mamba-radix-cache-strategy no_buffer "
            "([server] mamba_radix_cache_strategy = \"no_buffer\")") in report.reason, report.reason
    assert "[server] cuda_graph_max_bs (--cuda-graph-max-bs 256): \"ambiguous option: --cuda-graph-max-bs " \
           "could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\"; use " \
           "--cuda-graph-max-bs-decode 256" in report.reason, report.reason


def test_v0_5_23_runs_the_scenario_as_its_parser_takes_it(release_tree):
    """The remedy applied (the renamed keys): v0.5.23 sizes it, and its resolution shows the value given."""
    sc = load_scenario("zero-requests-dflash")
    report = run_scenario(release_tree("0.5.23"), sc.respelled(), verify_remedy=False)
    assert report.outcome is not Outcome.UNTESTABLE, report.reason
    assert sc.respelled().server["mamba_radix_cache_strategy"] == sc.server["mamba_scheduler_strategy"]


def test_the_pin_takes_the_old_flag_as_its_alias(pristine_tree):
    """v0.5.17 declares --mamba-scheduler-strategy with dest mamba_radix_cache_strategy: the same
    figures as the new spelling, and a note that its parser took it as an alias."""
    sc = load_scenario("max-running-lowered")
    old = run_scenario(pristine_tree, sc, verify_remedy=False)
    new = run_scenario(pristine_tree, sc.respelled(), verify_remedy=False)
    assert old.outcome is new.outcome and old.figures.get("max_total_num_tokens") == new.figures.get(
        "max_total_num_tokens") and old.figures.get("max_mamba_cache_size") == new.figures.get("max_mamba_cache_size")
    assert any("--mamba-scheduler-strategy: this release's parser stores it in mamba_radix_cache_strategy" in n
               for n in old.notes), old.notes


def test_regress_exits_125_naming_the_renamed_flag(release_tree):
    p = subprocess.run([sys.executable, str(ROOT / "tools/regress.py"), "--tree", str(release_tree("0.5.23")),
                        "--scenario", "zero-requests-dflash", "--no-remedy"], capture_output=True, text=True)
    assert p.returncode == 125, p.stdout + p.stderr
    assert p.stdout.startswith("UNTESTABLE  zero-requests-dflash"), p.stdout
    assert "use --mamba-radix-cache-strategy extra_buffer" in p.stdout


def test_the_planner_names_the_renamed_flag(release_tree):
    tree23 = core.resolve_tree(None, "0.5.23", None)
    with pytest.raises(UsageError) as e:
        core.parse_flags(tree23, ["--mamba-scheduler-strategy", "extra_buffer"])
    assert "unrecognized arguments: --mamba-scheduler-strategy extra_buffer" in e.value.message
    assert "--mamba-scheduler-strategy: use --mamba-radix-cache-strategy: --mamba-scheduler-strategy was " \
           "renamed --mamba-radix-cache-strategy" in e.value.message, e.value.message
    with pytest.raises(UsageError, match="--cuda-graph-max-bs: use --cuda-graph-max-bs-decode"):
        core.parse_flags(tree23, ["--cuda-graph-max-bs", "8"])
    fields, _ = core.parse_flags(core.resolve_tree(None, "0.5.17", None), ["--mamba-scheduler-strategy", "extra_buffer"])
    assert fields == {"mamba_radix_cache_strategy": "extra_buffer"}
