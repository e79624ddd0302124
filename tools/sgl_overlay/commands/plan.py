"""Will this model start on this GPU with these flags?  Answered by SGLang's own
KV-cache sizing code, run on a CPU (docs/plan.md).

  python tools/plan.py MODEL --gpu NAME [--draft DIR] [--release X | --tree PATH] -- SGLANG FLAGS...
  python tools/plan.py MODEL --free-gib PRE[,POST] [--readings logged] ... -- SGLANG FLAGS...
  python tools/plan.py MODEL --gpu NAME --releases 0.5.12.post1,0.5.13 -- SGLANG FLAGS...
  python tools/plan.py --gpus

MODEL is the model's directory (config.json, and model.safetensors.index.json
for the weights' size) or its config.json.  The flags after `--` are SGLang's
own, parsed by the chosen tree's ServerArgs (TP is --tp-size there).  The
default tree is the patched tree tools/apply.py builds at build/sglang.

Exit codes: 0 starts (also "starts, over budget by N GiB taken from the
headroom": the patched tree starts it with a warning), 1 will not start,
2 bad input, 3 a release artifact failed verification, 125 the harness could
not drive this tree for these inputs.
"""

import argparse

from .. import cli
from ..extras import require
from ..errors import UsageError
from ..harness.readings import ReadingKind, rounding_of
from ..planner import REJECTED, core, deployment, gpus, plan
from ..planner.render import compare_text, head_text, tail_text


def parse(argv):
    ours, sglang = cli.split_at_dashes(argv)
    ap = cli.Parser(prog="python tools/plan.py", description=__doc__.split("\n\n")[0] if __doc__ else None,
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    ap.add_argument("model", nargs="?", help="model directory or its config.json")
    ap.add_argument("--gpu", help=f"GPU name from the table: {', '.join(gpus.names())}")
    ap.add_argument("--gpus", action="store_true", help="list the GPU table and exit")
    ap.add_argument("--free-gib", help="free memory per GPU in GiB before the weights load, and optionally "
                    "after (PRE or PRE,POST); always wins over --gpu; what they are: --readings")
    ap.add_argument("--readings", choices=[k.value for k in ReadingKind], default=ReadingKind.SIZING.value,
                    help="what --free-gib gives: 'sizing' (default): the sizing's own readings, used as given; "
                    "'logged': the log's 'Load weight begin' / 'Load weight end ... avail mem' lines, each within "
                    "half its last digit, from which the sizing's are derived (docs/plan.md, 'Readings')")
    ap.add_argument("--weights-gib", type=float, help="the checkpoint's total weight size in GiB "
                    "(default: model.safetensors.index.json, else the config's parameter count)")
    ap.add_argument("--overhead-gib", type=float, default=gpus.DEFAULT_STARTUP_OVERHEAD_GIB,
                    help="assumed memory taken before the weights load, per GPU (default %(default)s)")
    ap.add_argument("--draft", help="the speculative drafter's directory or config.json")
    ap.add_argument("--tree", help="an SGLang source tree (checkout, build dir, unpacked wheel)")
    ap.add_argument("--release", help="a published SGLang release, fetched and verified (e.g. 0.5.13)")
    cli.add_root(ap)
    ap.add_argument("--releases", help="compare: the same plan on each of these releases (A,B,...)")
    ap.add_argument("--no-suggest", action="store_true", help="no suggestions (fewer sizing runs)")
    ap.add_argument("--suggest", help=f"only these knobs: {','.join(core.KNOBS)}")
    ap.add_argument("--no-sensitivity", action="store_true", help="skip the +-0.1 GiB re-runs")
    cli.add_output(ap, "the plan")
    args = ap.parse_args(ours)
    args.sglang = sglang
    return args


def _free(s):
    """(values, their rounding): --free-gib's figures, each within half its last digit."""
    if s is None:
        return None, (0.0, 0.0)
    parts = [x for x in s.split(",") if x.strip()]
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        raise UsageError(f"--free-gib {s!r}: not numbers", hint="give PRE or PRE,POST in GiB, e.g. 94.24,43.19") from None
    if not 1 <= len(vals) <= 2 or any(v <= 0 for v in vals):
        raise UsageError(f"--free-gib {s!r}: give one or two positive figures", hint="PRE or PRE,POST in GiB")
    rounding = [rounding_of(x) for x in parts]
    return vals, (rounding[0], rounding[-1])


def main(argv):
    args = parse(argv)
    if args.gpus:
        rows = [(g.name, f"{g.total_mib:,}", f"{g.total_gib:.2f}", g.source) for g in gpus.GPUS]
        return cli.emit({"gpus": [g.__dict__ | {"aliases": list(g.aliases)} for g in gpus.GPUS]}, args.json,
                        cli.table(rows, ["GPU", "total MiB", "total GiB", "source"]), exit_code=0)
    require("harness", "tools/plan.py")
    if not args.model:
        raise UsageError("plan.py: no model given", hint="python tools/plan.py MODEL_DIR --gpu NAME -- FLAGS")
    knobs = core.KNOBS
    if args.suggest:
        knobs = tuple(k.strip() for k in args.suggest.split(",") if k.strip())
        bad = [k for k in knobs if k not in core.KNOBS]
        if bad:
            raise UsageError(f"--suggest: unknown knob(s) {', '.join(bad)}", hint=f"known: {', '.join(core.KNOBS)}")
    progress = cli.Progress("plan", quiet=args.quiet or args.json)
    free, rounding = _free(args.free_gib)
    if args.readings != ReadingKind.SIZING and free is None:
        raise UsageError(f"--readings {args.readings} says what --free-gib gives, and there is no --free-gib",
                         hint="give the log's two readings with --free-gib PRE,POST (an estimate from --gpu is "
                              "always of 'Load weight begin')")
    common = dict(model=args.model, gpu=args.gpu, argv=args.sglang, draft=args.draft, free_gib=free,
                  weights_gib=args.weights_gib, overhead_gib=args.overhead_gib, readings=ReadingKind(args.readings),
                  rounding_gib=rounding)
    if args.releases:
        if args.tree or args.release:
            raise UsageError("--releases compares published releases; drop --tree/--release",
                             hint="python tools/plan.py MODEL --gpu NAME --releases 0.5.12.post1,0.5.13 -- FLAGS")
        reports, errors = [], []
        releases = [r.strip() for r in args.releases.split(",") if r.strip()]
        for rel in releases:
            progress(f"release {rel}: fetching, parsing flags with its ServerArgs, sizing")
            try:
                dep = deployment(release=rel, **common)
            except UsageError as e:  # this release rejects the inputs: its column says why
                errors.append(e)
                reports.append({"tree": {"release": rel}, "verdict": REJECTED, "why": [e.message],
                                "ledger": {}, "exit_code": e.code})
                continue
            report = plan(dep, with_suggestions=False, with_sensitivity=False)
            report["exit_code"] = report["verdict"].exit_code
            reports.append(report)
        if len(errors) == len(releases) and len({e.message.replace(r, "") for e, r in zip(errors, releases)}) == 1:
            raise errors[0]  # the same bad input for every release: one error
        return cli.emit({"releases": reports}, args.json, compare_text(reports),
                        exit_code=max(r["exit_code"] for r in reports))
    progress("resolving the tree, model and flags")
    dep = deployment(tree=args.tree, release=args.release, checkout=args.root, **common)
    progress(f"sizing on {dep.tree.label} ({dep.tree.era} layout)")
    report, base = core.verdict_report(dep)
    if not args.json:  # the verdict first; the re-runs after it, each stage with a progress line
        print(head_text(report), flush=True)
    core.complete(dep, report, base, with_suggestions=not args.no_suggest,
                  with_sensitivity=not args.no_sensitivity, knobs=knobs, progress=progress)
    return cli.emit(report, args.json, tail_text(report), exit_code=report["verdict"].exit_code)

