"""The pair's drafter, trained in `run --stage train|all`: the AR server's greedy answers to the
training prompts, SpecForge's DFlash drafter trained on them against the target's features
(spec_pair.train_drafter, in a helper interpreter), and the training's record beside the drafter
(pair dir/training.json), which `--stage measure` proves its drafter against."""
import json
import os
import sys
import time

from .. import PACKAGE, child_pythonpath
from .. import spec_bench as bench
from .. import spec_pair as pair
from ..process_groups import GROUPS
from .plan import Model, Stage, common_flags, pair_servers
from .progress import log


def trained_drafter(places, prompts_sha256):
    """The training's record (places.record) once the drafter beside it is proved: its
    model.safetensors has the recorded sha256, its config.json the recorded config, and it was
    trained on the same prompts.json; a PairError naming the file otherwise."""
    rec_file, ddir = places.record, places.drafter
    again = (f"run `python3 -m tools.gpu.spec_value run --model pair --stage train` with the same --work "
             f"({places.work}) first, on the same warm machine (a device machine keeps /tmp only while it is "
             "warm), then --stage measure")
    for f in (rec_file, ddir / "model.safetensors", ddir / "config.json"):
        if not f.is_file():
            raise pair.PairError(f"--stage measure: {f} is missing (the trained drafter and its record); {again}")
    try:
        rec = json.loads(rec_file.read_text())
        want, cfg = rec["training"]["sha256"], rec["training"]["config"]
    except (ValueError, KeyError, TypeError) as e:
        raise pair.PairError(f"--stage measure: {rec_file} is not a training record ({type(e).__name__}: {e}); "
                             f"{again}") from None
    got = pair.sha256_file(ddir / "model.safetensors")
    if got != want:
        raise pair.PairError(f"--stage measure: {ddir / 'model.safetensors'} has sha256 {got}, {rec_file} records "
                             f"{want} (the drafter changed after its training); {again}")
    try:
        same = json.loads((ddir / "config.json").read_text()) == cfg
    except ValueError:
        same = False
    if not same:
        raise pair.PairError(f"--stage measure: {ddir / 'config.json'} is not the config {rec_file} records "
                             f"(the drafter changed after its training); {again}")
    if rec.get("prompts_sha256") != prompts_sha256:
        raise pair.PairError(f"--stage measure: the drafter was trained on prompts.json sha256 "
                             f"{rec.get('prompts_sha256')}, --pair has {prompts_sha256} (the evaluation prompts "
                             f"must be held out of the training's); {again}")
    return rec


def train_pair(args, servers, runs, report, places, train_prompts, save):
    """The AR server, its greedy answers to the training prompts and SpecForge's drafter trained on
    them (spec_pair.train_drafter): report's training_data and training, recorded in
    places.record beside places.drafter.  Leaves the AR server running; False when it did not start
    (every server stopped, the report saved)."""
    pdir, tdir, work = places.pair, places.target, places.work
    ar = pair_servers([], Stage.TRAIN, places.drafter)[0]
    base = servers.start(ar.config, tdir, ar.flags, ar.port, common_flags(args, Model.PAIR))
    if not servers.wait([ar.config.name], args.start_timeout):
        servers.stop_all(runs)
        save()
        return False
    # the target's own greedy answers to the training prompts
    t1 = time.time()
    gen = bench.closed_loop(base, train_prompts, 128, {"temperature": 0, "max_new_tokens": args.train_answer_tokens})
    answers = {r["prompt"]: r["output_ids"] or [] for r in gen["requests"]}
    seqs = pair.training_sequences(train_prompts, [answers.get(i, []) for i in range(len(train_prompts))],
                                   args.train_max_len)
    report["training_data"] = {"prompts": len(train_prompts), "answered": len(gen["requests"]),
                               "errors": gen["errors"][:3], "sequences": len(seqs),
                               "answer_tokens": sum(len(a) for a in answers.values()), "s": round(time.time() - t1, 1)}
    log(f"training data {report['training_data']}")
    ddir = places.drafter
    places.record.unlink(missing_ok=True)      # a record stands only for the drafter trained with it
    (pdir / "train.json").write_text(json.dumps(seqs))
    sf = next((p for d_ in places.parts for p in d_.glob("specforge-*.whl")), None)
    if sf is None:
        raise pair.PairError("no specforge wheel in --pair (python3 -m tools.gpu.spec_value prepare --specforge WHEEL)")
    GROUPS.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                str(work / "specforge"), str(sf)], check=True)
    cfg = pair.drafter_config(json.loads((tdir / "config.json").read_text()), layers=args.draft_layers)
    code = (f"import json, sys; from {PACKAGE} import spec_pair as p; "
            "seqs = [tuple(s) for s in json.load(open(sys.argv[2]))]; "
            "r = p.train_drafter(sys.argv[1], seqs, json.loads(sys.argv[3]), sys.argv[4], steps=int(sys.argv[5]), "
            "batch=int(sys.argv[6])); print('RESULT ' + json.dumps(r))")
    cmd = [sys.executable, "-c", code, str(tdir), str(pdir / "train.json"), json.dumps(cfg),
           str(ddir), str(args.train_steps), str(args.train_batch)]
    report["training"] = {"command": " ".join(cmd[:2]) + " ... (spec_pair.train_drafter)", "config": cfg,
                          "specforge": sf.name}
    r = GROUPS.run(cmd, capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=child_pythonpath(work / "specforge", work / "deps")))
    print(r.stdout[-2000:], flush=True)
    res = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    if r.returncode != 0 or not res:
        report["training"]["error"] = r.stderr[-3000:]
        servers.stop_all(runs)
        save()
        raise SystemExit(f"spec_value: training failed:\n{r.stderr[-3000:]}")
    report["training"].update(json.loads(res[-1][7:]))
    log(f"drafter trained: {report['training']['seconds']} s, sha256 {report['training']['sha256']}")
    pair.record_training(places.pair, report)
    save()
    return True

