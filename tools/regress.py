#!/usr/bin/env python3
"""Run SGLang's real KV-cache sizing code from a source tree against a scenario.

    python tools/regress.py --tree PATH --scenario NAME [--json]
    python tools/regress.py --list

PATH holds python/sglang (a checkout, or the tree tools/apply.py builds at
build/sglang) or sglang/ (an unpacked wheel or sdist).  Exit status follows
git bisect run: 0 pass, 1 fail, 125 untestable, 2 usage error.
"""

import os, sys
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402

from tools.sglo.harness import (  # noqa: E402
    NoSource,
    ScenarioError,
    load_scenario,
    run_scenario,
    scenario_names,
)

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_UNTESTABLE = 0, 1, 2, 125


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", help="source tree (checkout, build/sglang, unpacked wheel or sdist)")
    p.add_argument("--scenario", help="scenario name (see --list) or path to a .toml file")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--no-remedy", action="store_true", help="do not re-run to verify a refusal's remedy")
    args = p.parse_args(argv)
    if args.list:
        for name in scenario_names():
            print(name)
        return EXIT_PASS
    if not args.tree or not args.scenario:
        p.print_usage(sys.stderr)
        print("regress: --tree and --scenario are required (or --list)", file=sys.stderr)
        return EXIT_USAGE
    try:
        scenario = load_scenario(args.scenario)
        report = run_scenario(args.tree, scenario, verify_remedy=not args.no_remedy)
    except (NoSource, ScenarioError) as e:
        print(f"regress: {e}", file=sys.stderr)
        return EXIT_USAGE
    code = {True: EXIT_PASS, False: EXIT_FAIL, None: EXIT_UNTESTABLE}[report["passed"]]
    report["exit"] = code
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(_summary(report))
    return code


def _summary(r: dict) -> str:
    f = r.get("figures", {})
    verdict = {True: "PASS", False: "FAIL", None: "UNTESTABLE"}[r["passed"]]
    lines = [
        f"{verdict}  {r['scenario']} on {r.get('version') or r['tree']} ({r['layout']} layout): {r['outcome']}",
        f"  {r['judgement']}",
    ]
    keys = ("available_bytes", "cell_size_bytes", "max_total_num_tokens", "max_running_requests",
            "max_mamba_cache_size", "mamba_cache_per_req_bytes")
    shown = [f"{k}={f[k]}" for k in keys if f.get(k) is not None]
    if shown:
        lines.append("  " + ", ".join(shown))
    if r.get("outcome") == "untestable" and r.get("error"):
        lines.append(f"  where: {r['error'].get('where') or 'harness'}; next step: provide what is named above "
                     f"in tools/sglo/harness (see docs/regress.md, 'Supporting a new release')")
    lines.append(f"  wall {r['timing'].get('wall_s')} s (torch import {r['timing'].get('import_torch_s')} s, "
                 f"sizing {r['timing'].get('sizing_s')} s)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
