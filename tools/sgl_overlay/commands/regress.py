"""Run SGLang's real KV-cache sizing code from a source tree against a scenario.

    python tools/regress.py --tree PATH --scenario NAME [--json]
    python tools/regress.py --list

PATH holds python/sglang (a checkout, or the tree tools/apply.py builds at
build/sglang) or sglang/ (an unpacked wheel or sdist).  Exit status follows
git bisect run: 0 pass, 1 fail, 125 untestable, 2 usage error.  The caller's
SGLANG_* settings reach the sizing, as they would reach a server started from
the same shell, and the report names them (docs/regress.md).
"""

from .. import cli
from ..extras import require
from ..errors import OK
from ..harness import (
    Outcome,
    Report,
    Result,
    Scenario,
    load_scenario,
    run_scenario,
    scenario_names,
)
from ..harness.environment import describe

def main(argv) -> int:
    p = cli.Parser(prog="python tools/regress.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", help="source tree (checkout, build/sglang, unpacked wheel or sdist)")
    p.add_argument("--scenario", help="scenario name (see --list) or path to a .toml file")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--list", action="store_true", help="list the scenarios, each with what it is, and exit")
    p.add_argument("--no-remedy", action="store_true", help="do not re-run to verify a refusal's remedy")
    args = p.parse_args(argv)
    if args.list:
        listing = [(name, load_scenario(name).description) for name in scenario_names()]
        width = max(len(n) for n, _ in listing)
        return cli.emit({"scenarios": [{"name": n, "description": d} for n, d in listing]}, args.json,
                        "\n".join(f"{n:<{width}}  {d}".rstrip() for n, d in listing), exit_code=OK)
    if not args.tree or not args.scenario:
        p.error("--tree and --scenario are required (or --list)")
    require("harness", "tools/regress.py")
    scenario = load_scenario(args.scenario)
    report = run_scenario(args.tree, scenario, verify_remedy=not args.no_remedy)
    return cli.emit(report, args.json, _summary(report, scenario), exit_code=report.result.exit_code,
                    sort_keys=False)              # the report's keys in their documented order (docs/regress.md)


def outcome_words(r: Report, scenario: Scenario) -> str:
    """The outcome against what the scenario expects: "refused, as the scenario expects" for a pass that
    is not a start, "refused; the scenario expects ok" for a fail (a start needs no such words)."""
    expected = " or ".join(str(o) for o in scenario.expect.passing)
    if r.result is Result.FAIL and r.outcome not in scenario.expect.passing:
        return f"{r.outcome}; the scenario expects {expected}"
    if r.result is Result.PASS and r.outcome is not Outcome.OK:
        return f"{r.outcome}, as the scenario expects"
    return str(r.outcome)


def _summary(r: Report, scenario: Scenario) -> str:
    f = r.figures
    lines = [
        f"{r.result.label}  {r.scenario} on {r.version or r.tree} ({r.layout} layout): {outcome_words(r, scenario)}",
        f"  {r.judgement}",
    ]
    keys = ("available_bytes", "cell_size_bytes", "max_total_num_tokens", "max_running_requests",
            "max_mamba_cache_size", "mamba_cache_per_req_bytes")
    shown = [f"{k}={f[k]}" for k in keys if f.get(k) is not None]
    if shown:
        lines.append("  " + ", ".join(shown))
    rng = r.range_json()
    if rng:
        spans = ", ".join(f"{k} {lo:,}-{hi:,}" if lo != hi else f"{k} {lo:,}" for k, (lo, hi) in rng["figures"].items())
        lines.append(f"  from the log's readings: {spans} (figures above: the pessimistic end; "
                     f"{rng['runs']} runs along the span)")
        if rng["optimistic"]["outcome"] != r.outcome:
            lines.append(f"  at the optimistic end: {rng['optimistic']['outcome']} ({rng['optimistic']['reason']})")
        lines.append(f"  the span's width: {rng['width']}")
    for note in (r.readings or {}).get("notes") or []:
        lines.append(f"  readings: {note}")
    drafter = (r.drafter_reading or {}).get("note")
    if drafter:
        lines.append(f"  {drafter}")
    settings = describe(r.environment or {})
    if settings:
        lines.append(f"  {settings}")
    if r.outcome is Outcome.UNTESTABLE and r.error:
        lines.append(f"  where: {r.error.get('where') or 'harness'}; next step: the reason above names what is "
                     f"missing: a key to add to the scenario file (docs/scenarios.md), or an input of this release "
                     f"the harness does not model yet (docs/harness.md, 'Supporting a new release')")
    lines.append(f"  wall {r.timing.get('wall_s')} s (torch import {r.timing.get('import_torch_s')} s, "
                 f"sizing {r.timing.get('sizing_s')} s)")
    return "\n".join(lines)

