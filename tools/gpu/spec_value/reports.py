"""A finished report of `run` or `merge` read back (any machine): the file a folder or path names,
the --speculative-ddtree-chain-batch its medians give a DDTREE configuration (chain-batch), and
the large target's projection with the pair's tree/chain acceptance ratio (project)."""
import json
from pathlib import Path

from .. import spec_bench as bench

REPORT = "spec_value.json"


def read_report(given, verb, hint=""):
    """(file, report) of a --out folder or a spec_value.json; ValueError naming the verb, the file and
    why it is not a report (then `hint`)."""
    f = Path(given) / REPORT if Path(given).is_dir() else Path(given)
    try:
        return f, json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{verb}: {f}: not a report of spec_value run or merge ({type(e).__name__}: {e}){hint}") from None


def chain_batch(args):
    f, report = read_report(args.report, "chain-batch")
    choice = bench.chain_batch(report.get("summary") or [], args.config)
    if args.json:
        print(json.dumps({"report": str(f), "config": choice.config, "dflash": choice.dflash,
                          "batches": [{"batch": b, "tree_tokens_per_s": t, "dflash_tokens_per_s": d}
                                      for b, t, d in choice.batches],
                          "chain_batch": choice.chain_batch, "chain_config": choice.chain_config}, indent=1))
        return 0
    for b, t, d in choice.batches:
        print(f"batch {b}: {choice.config} {t:.1f} tokens/s, {choice.dflash} {d:.1f}: "
              f"{'chain' if b >= (choice.chain_batch or float('inf')) else 'tree'}")
    if choice.chain_batch is None:
        print(f"{choice.config}: the tree is faster at the largest measured batch: no chain batch "
              "(leave --speculative-ddtree-chain-batch out)")
    else:
        print(f"{choice.config}: --speculative-ddtree-chain-batch {choice.chain_batch} "
              f"(measure it as {choice.chain_config})")
    return 0


def project(args):
    """The large target's projection with the pair's measured tree/chain acceptance ratio
    (spec_bench.ratio_projection), from the reports (or --out folders) of the runs."""
    def rows(given):
        f, report = read_report(given, "project")
        if not isinstance(report, dict) or "summary" not in report:
            raise ValueError(f"project: {f}: not a report of spec_value run or merge (no summary)")
        return report["summary"]
    res = bench.ratio_projection(rows(args.pair_report), rows(args.big_report), args.config,
                                 rows(args.big_ar_report) if args.big_ar_report else None, batch=args.batch)
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"{res['config']} at batch {res['batch']}: the pair's acceptance ratio over DFLASH {res['ratio']}, "
          f"the large target's AR step {res['ar_step_ms']} ms (a projection, not a measurement)")
    print("| published DFLASH acceptance (source) | tree acceptance (× ratio) | DFLASH step / AR | tree step / AR "
          "| DFLASH × AR | tree × AR | tree × DFLASH |\n|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        print(f"| {r['source']}: {r['dflash_accept_length']} | {r['tree_accept_length']} | {r['dflash_step_over_ar']} | "
              f"{r['tree_step_over_ar']} | {r['dflash_speedup']} | {r['tree_speedup']} | {r['tree_over_dflash']} |")
    return 0
