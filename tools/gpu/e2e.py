"""End-to-end check on a GPU machine: real SGLang servers, pristine (the
release) against patched (the overlay's wheel), from an offline bundle
(tools/bundle.py; docs/gpu.md).

  python tools/gpu/e2e.py --bundle build/bundle --out DIR [--cases dense,zero-requests-dflash,dflash-smoke,h200-16]

Per case and tree: `python -m sglang.launch_server` with dummy weights and
--skip-tokenizer-init, /health, a batch of /generate requests of varied
lengths (input_ids), one streaming request, clean shutdown (SIGINT); the
start-up log is parsed (avail mem, KV/Mamba allocation, decided counts,
server_args, the error) and, on the patched tree, the memory ledger JSON
(SGLO_MEMORY_LEDGER).  A patched refusal with a `remedy:` line is re-run
once with that remedy.  Writes DIR/e2e.json and DIR/e2e.md (a table).

  python tools/gpu/e2e.py --bundle B --out DIR --cases '' --lossless all --budget-s 480

The lossless runs (e2e_models: small dense and hybrid models with real
weights written here, and DFlash drafters; e2e_lossless: greedy outputs of
DFLASH / DDTREE / CUDA graphs against the same tree's non-speculative
server, token for token, with margins and acceptance; e2e_pools: the patched
ledger's byte figures against the pools' tensors, which the allocation probe
in tools/gpu/probe records inside the server).  Every server runs with the
probe, so its exact free-memory readings are in the report for
tools/gpu/e2e_plan.py (the planner against reality, run on a CPU machine).

The parsing, comparison and report functions are pure and tested on CPU
(tests/gpu) against logs recorded on an H200 (tests/gpu/data).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
import hashlib
import base64
import importlib.util
from pathlib import Path

from pathload import load  # tools/gpu/pathload.py: this folder is a script's sys.path[0]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
GIB = 1 << 30


# its sibling modules (this is a script for the GPU machine, run from a copy of the tree; tools/gpu is no package)
models_mod = load(HERE / "e2e_models.py", "e2e_models")
lossless = load(HERE / "e2e_lossless.py", "e2e_lossless")
pools_mod = load(HERE / "e2e_pools.py", "e2e_pools")

# --------------------------------------------------------------------------
# parsing (pure)

_NUM = r"([-\d.]+)"
PATTERNS = {
    "load_begin_avail_gib": re.compile(r"Load weight begin\. avail mem=" + _NUM + " GB"),
    "load_end_avail_gib": re.compile(r"Load weight end\..*?avail mem=" + _NUM + " GB"),
    "weights_gib": re.compile(r"Load weight end\..*?mem usage=" + _NUM + " GB"),
    "pool_end_avail_gib": re.compile(r"Memory pool end\. avail mem=" + _NUM + " GB"),
}
KV_LINE = re.compile(r"KV Cache is allocated\. (.*)$")
MAMBA_LINE = re.compile(r"Mamba Cache is allocated\. (.*)$")
DECIDED = re.compile(r"max_total_num_tokens=(\d+).*?max_running_requests=(\d+)")
SERVER_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)\s*$")
ERROR = re.compile(r"^\s*((?:[A-Za-z_.]+Error|MemoryBudgetError|Exception)(?::.*)?)$")
REMEDY = re.compile(r"^remedy: --([a-z0-9-]+) = (\S+)\s*$")
SERVER_ARG_KEYS = ("mem_fraction_static", "max_running_requests", "max_total_tokens", "context_length",
                   "chunked_prefill_size", "cuda_graph_max_bs", "max_mamba_cache_size", "mamba_scheduler_strategy",
                   "kv_cache_dtype", "speculative_algorithm", "speculative_num_draft_tokens",
                   "speculative_dflash_block_size", "attention_backend", "disable_radix_cache", "page_size")


def _pairs(text):
    """`#tokens: 11893, K size: 1.23 GB` -> {"tokens": 11893, "K_size_gib": 1.23}."""
    out = {}
    for key, value, unit in re.findall(r"#?([A-Za-z_ ]+?): ([-\d.]+) ?(GB)?(?:,|$)", text):
        key = key.strip().replace(" ", "_") + ("_gib" if unit else "")
        out[key] = float(value) if "." in value or unit else int(value)
    return out


def parse_log(text):
    """The figures a start-up log gives (GiB with 2 decimals, as SGLang logs them)."""
    r = {"kv_cache": [], "mamba_cache": [], "errors": [], "remedies": []}
    for line in text.splitlines():
        for key, pat in PATTERNS.items():
            m = pat.search(line)
            if m and key not in r:
                r[key] = float(m.group(1))
        if (m := KV_LINE.search(line)):
            r["kv_cache"].append(_pairs(m.group(1)))
        if (m := MAMBA_LINE.search(line)):
            r["mamba_cache"].append(_pairs(m.group(1)))
        if (m := DECIDED.search(line)) and "max_total_num_tokens" not in r:
            r["max_total_num_tokens"], r["max_running_requests"] = int(m.group(1)), int(m.group(2))
        if (m := SERVER_ARGS.search(line)) and "server_args" not in r:
            body = m.group(1)
            r["server_args"] = {k: _literal(v) for k in SERVER_ARG_KEYS
                                for v in re.findall(rf"(?<![a-z_]){k}=('[^']*'|[^,()]+)", body)[:1]}
        if (m := ERROR.match(line)):
            r["errors"].append(m.group(1).strip())
        if (m := REMEDY.match(line.strip())):
            r["remedies"].append({"flag": m.group(1), "value": m.group(2)})
    r["errors"] = list(dict.fromkeys(r["errors"]))
    return r


def _literal(v):
    v = v.strip()
    if v.startswith("'"):
        return v.strip("'")
    if v in ("True", "False"):
        return v == "True"
    if v == "None":
        return None
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def parse_ledger(text):
    """The memory ledger JSON (docs/memory.md), in the figures the report shows."""
    d = json.loads(text)
    f = d.get("figures", {})
    res = d.get("reservations", {})
    return {"outcome": d.get("outcome"), "reason": d.get("reason"), "remedies": d.get("remedies", []),
            "case": f.get("case"),
            "pre_load_free_gib": _gib(f.get("pre_load_free_bytes")), "post_load_free_gib": _gib(f.get("post_load_free_bytes")),
            "budget_gib": _gib(f.get("budget_bytes")), "max_total_num_tokens": f.get("max_total_num_tokens"),
            "max_running_requests": f.get("max_running_requests"), "max_mamba_cache_size": f.get("max_mamba_cache_size"),
            "reserved_gib": {k: _gib(v.get("bytes")) for k, v in res.items() if isinstance(v, dict)}}


def _gib(b):
    return None if b is None else round(b / GIB, 3)


def outcome(run):
    """ok / refused / failed, from what the run saw."""
    if run.get("healthy"):
        return "ok"
    log = run.get("log_figures", {})
    if log.get("remedies") or any("Not enough GPU memory" in e or "Raise --mem-fraction-static above" in e
                                  for e in log.get("errors", [])):
        return "refused"
    return "failed"


def check_case(case, runs):
    """The case's expectations against its runs: {"pass": bool, "why": [...]}."""
    why, ok = [], True
    pr, pa = runs.get("pristine"), runs.get("patched")
    want = case.get("expect", {})
    if pr and want.get("pristine_error"):
        hit = any(want["pristine_error"] in e for e in pr["log_figures"]["errors"])
        ok &= hit
        why.append(f"pristine {'shows' if hit else 'does NOT show'} {want['pristine_error']!r}")
    if pr and want.get("pristine") and outcome(pr) != want["pristine"]:
        ok = False
        why.append(f"pristine {outcome(pr)}, expected {want['pristine']}")
    if pa:
        o = outcome(pa)
        allowed = want.get("patched", ["ok"])
        good = o in allowed and (o != "refused" or bool(pa["log_figures"]["remedies"]))
        ok &= good
        why.append(f"patched {o}" + (" with remedy " + ", ".join(f"--{r['flag']} {r['value']}" for r in pa["log_figures"]["remedies"]) if o == "refused" else "")
                   + ("" if good else f" (expected {allowed})"))
        rr = runs.get("patched+remedy")
        if rr:
            g = outcome(rr) == "ok"
            ok &= g
            why.append(f"remedy re-run {outcome(rr)}")
    for k in ("pristine", "patched", "patched+remedy"):
        r = runs.get(k)
        if r and r.get("healthy") and not r.get("requests_ok"):
            ok = False
            why.append(f"{k}: requests failed: {r.get('request_error')}")
    for k in ("patched", "patched+remedy"):
        r = runs.get(k)
        if r and r.get("pools_vs_ledger") is not None and not pools_mod.equal(r["pools_vs_ledger"]):
            ok = False
            why.append(f"{k}: ledger vs allocated: " + pools_mod.summary(r["pools_vs_ledger"]))
    if pr and pa and pr.get("outputs") and pa.get("outputs") and want.get("same_outputs"):
        same = pr["outputs"] == pa["outputs"]
        ok &= same
        why.append("greedy outputs identical" if same else "greedy outputs DIFFER")
    return {"pass": bool(ok), "why": why}


def table(report):
    rows = ["| case | tree | outcome | avail before / after load (GiB) | KV tokens | max_running_requests | Mamba slots | requests | note |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c in report["cases"]:
        for tree, r in c["runs"].items():
            f = r["log_figures"]
            mamba = f["mamba_cache"][0].get("max_mamba_cache_size") if f["mamba_cache"] else ""
            kv = "/".join(str(k.get("tokens", "")) for k in f["kv_cache"])
            note = (f["errors"][-1] if f["errors"] and not r.get("healthy") else "")[:90]
            if f["remedies"]:
                note += " remedy: " + ", ".join(f"--{x['flag']} {x['value']}" for x in f["remedies"])
            req = f"{r.get('n_ok', 0)}/{r.get('n_requests', 0)} + stream {'ok' if r.get('stream_ok') else '-'}" if r.get("healthy") else "-"
            rows.append(f"| {c['name']} | {tree} | {outcome(r)} | {f.get('load_begin_avail_gib', '')} / {f.get('load_end_avail_gib', '')} "
                        f"| {kv} | {f.get('max_running_requests', '')} | {mamba} | {req} | {note} |")
    rows.append("")
    for c in report["cases"]:
        rows.append(f"- {c['name']}: {'PASS' if c['check']['pass'] else 'FAIL'}: " + "; ".join(c["check"]["why"]))
    return "\n".join(rows) + "\n"


# --------------------------------------------------------------------------
# installing the bundle (no network)

def install(bundle, work):
    bundle, work = Path(bundle), Path(work)
    manifest = json.loads((bundle / "bundle.json").read_text())
    deps = [str(bundle / c["file"]) for c in manifest["chosen"]]
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check"]
    if deps:
        subprocess.run(pip + ["--target", str(work / "deps")] + deps, check=True)
    if not manifest.get("patched_wheel"):
        # a pristine bundle of another release (tools/bundle.py --release): its own wheel, no stack
        subprocess.run(pip + ["--target", str(work / "pristine"), str(bundle / manifest["release_wheel"])], check=True)
        return {"stubs": _stubs(work), "bundle_total": manifest["total"], "release": manifest.get("release"),
                "pristine_only": True}
    subprocess.run(pip + ["--target", str(work / "patched"), str(bundle / manifest["patched_wheel"])], check=True)
    # the release's own tree: the patched one with the release's files put back, proven by its RECORD
    pristine = work / "pristine"
    shutil.copytree(work / "patched" / "sglang", pristine / "sglang")
    with zipfile.ZipFile(bundle / manifest["release_delta"]["file"]) as z:
        for n in z.namelist():
            if n.startswith("files/") and not n.endswith("/"):
                (pristine / n[len("files/"):]).write_bytes(z.read(n))
        for a in z.read("added.txt").decode().split():
            (pristine / a).unlink()
        record = z.read("RECORD").decode().splitlines()
    bad = []
    for line in record:
        path, digest = line.split(",")[:2]
        if not path.startswith("sglang/") or not digest:
            continue
        got = base64.urlsafe_b64encode(hashlib.sha256((pristine / path).read_bytes()).digest()).rstrip(b"=").decode()
        if "sha256=" + got != digest:
            bad.append(path)
    if bad:
        raise SystemExit(f"the rebuilt release tree differs from the release's RECORD: {bad[:5]}")
    return {"stubs": _stubs(work), "bundle_total": manifest["total"],
            "pristine_proven_files": sum(1 for l in record if l.startswith("sglang/"))}


# import-only stand-ins for what the server imports at module level but the checks never use, written when
# neither the machine nor the bundle has the package: sglang/utils.py imports IPython.display (for notebooks;
# IPython and its dependencies are 7.5 MiB); the OpenAI streaming-ASR and realtime routes import soundfile
# (audio inputs; the pin and every release since), which a bundle at its budget may leave out (bundle.STUBBABLE:
# v0.5.16's), and from v0.5.16 the function-call parser imports xgrammar (below).  What a release's start
# imports that neither the machine nor a bundle has: tools/imports.py (docs/bundle.md)
STUBS = {
    "IPython": {"IPython/__init__.py": "", "IPython/display.py": "class HTML(str):\n    pass\n\n\ndef display(*a, **k):\n    pass\n"},
    "soundfile": {"soundfile.py": "# stand-in (tools/gpu/e2e.py STUBS): audio inputs are not available\n"},
    # from v0.5.16 sglang/srt/function_call/inkling_detector.py imports xgrammar.StructuralTag at module level
    # (the grammar backend itself imports xgrammar only when a request asks for structured output)
    # (a pydantic field type there: the stand-in is a model that accepts any fields)
    "xgrammar": {"xgrammar.py": "import pydantic\n\n\n"
                                "class StructuralTag(pydantic.BaseModel):  # stand-in (tools/gpu/e2e.py STUBS)\n"
                                "    model_config = pydantic.ConfigDict(extra='allow')\n"},
}


def _stubs(work):
    """The STUBS written for this machine and bundle (reported as "stubs")."""
    written = []
    for name, files in STUBS.items():
        if importlib.util.find_spec(name) is not None or any((work / "deps").glob(f"{name}*")):
            continue
        for rel, text in files.items():
            (work / "stubs" / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / "stubs" / rel).write_text(text)
        written.append(name)
    return written


# --------------------------------------------------------------------------
# models (config.json only: --load-format dummy)

DENSE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
         "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
         "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
         "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": True, "bos_token_id": 151643,
         "eos_token_id": 151645, "attention_bias": False, "attention_dropout": 0.0}


def make_models(work):
    work = Path(work)
    dense = work / "models" / "qwen3-dense"
    dense.mkdir(parents=True, exist_ok=True)
    (dense / "config.json").write_text(json.dumps(DENSE, indent=1))
    big = work / "models" / "qwen3.6-27b"
    draft = work / "models" / "qwen3.6-27b-dflash"
    for d, src in ((big, "qwen3.6-27b"), (draft, "qwen3.6-27b-dflash")):
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tests/plan/data" / src / "config.json", d / "config.json")
    # tests/plan/data keeps only the drafter fields the sizing reads; transformers
    # needs a model type and the attention shape to build it (a Qwen3 decoder, as
    # DFlash drafters are; these fields do not enter the KV or state sizing)
    cfg = json.loads((draft / "config.json").read_text())
    for k, v in {"model_type": "qwen3", "num_attention_heads": 40, "intermediate_size": 17408,
                 "rms_norm_eps": 1e-6, "rope_theta": 10000000, "max_position_embeddings": 262144,
                 "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}.items():
        cfg.setdefault(k, v)
    (draft / "config.json").write_text(json.dumps(cfg, indent=1))
    _processor(big, work)
    return {"dense": dense, "big": big, "draft": draft}


def record_configs(models, out):
    """The models' config.json files under out/models/NAME (what tools/gpu/e2e_plan.py reads)."""
    for p in models.values():
        (out / "models" / p.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p / "config.json", out / "models" / p.name / "config.json")


def _processor(d, work):
    """Qwen3_5ForConditionalGeneration needs a processor even with
    --skip-tokenizer-init: a tiny word-level tokenizer holding the vision
    special tokens, and a Qwen3-VL processor around it."""
    code = r'''
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, AutoProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
d = sys.argv[1]
special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
vocab = {t: i for i, t in enumerate(special + ["a", "b", "c"])}
tk = Tokenizer(models.WordLevel(vocab, unk_token="a"))
tk.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                               additional_special_tokens=special)
fast.save_pretrained(d)
try:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    video = Qwen3VLVideoProcessor()
except Exception:
    video = None
p = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=fast, video_processor=video)
p.save_pretrained(d)
print("processor ok")
'''
    r = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=f"{work / 'deps'}"))
    if r.returncode != 0:
        print("processor:", r.stderr[-3000:], file=sys.stderr)
    return r.returncode == 0


# --------------------------------------------------------------------------
# servers

COMMON = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
          "--disable-cuda-graph", "--disable-piecewise-cuda-graph", "--log-level", "info", "--random-seed", "0"]
BIG = ["--mm-attention-backend", "triton_attn", "--context-length", "32768", "--tp", "1", "--page-size", "1",
       "--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "16"]
# the 27B-shaped model without a drafter and without --context-length (the model's own 262,144)
ROPE_FLAGS = ["--mm-attention-backend", "triton_attn", "--tp", "1", "--page-size", "1", "--disable-radix-cache",
              "--mamba-scheduler-strategy", "no_buffer"]

# the incident's known-good service (scenario dflash-smoke) but its --mem-fraction-static
SMOKE = BIG + ["--disable-radix-cache", "--mamba-scheduler-strategy", "no_buffer", "--max-running-requests", "4",
               "--max-mamba-cache-size", "24"]

CASES = {
    "dense": {"model": "dense", "free_gib": None,
              "flags": ["--mem-fraction-static", "0.5", "--context-length", "4096"],
              "expect": {"pristine": "ok", "patched": ["ok"], "same_outputs": True}},
    # tools/sgl_overlay/harness/scenarios/zero-requests-dflash.toml (docs/incidents.md)
    "zero-requests-dflash": {"model": "big", "free_gib": 94.24,
                             "flags": BIG + ["--mamba-scheduler-strategy", "extra_buffer", "--max-running-requests", "4",
                                             "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.647166"],
                             "expect": {"pristine_error": "max_running_request is zero", "patched": ["ok", "refused"]}},
    # tools/sgl_overlay/harness/scenarios/dflash-smoke.toml
    "dflash-smoke": {"model": "big", "free_gib": 94.24, "flags": SMOKE + ["--mem-fraction-static", "0.6856901"],
                     "expect": {"pristine": "ok", "patched": ["ok", "refused"]}},
    # the same flags on a release from v0.5.14 (a pristine bundle: tools/bundle.py --release 0.5.16 --slim-release):
    # from sgl-project/sglang#23862 (v0.5.14) the drafter starts before the KV sizing, so its weights are in the
    # sizing's reading and the release refuses these flags (harness/draft_reading.py, docs/results/regress.md)
    "dflash-smoke-release": {"model": "big", "free_gib": 94.24, "flags": SMOKE + ["--mem-fraction-static", "0.6856901"],
                             "expect": {"pristine_error": "Loaded weights leave no GPU memory"}},
    # ... and starts them with the fraction raised by the drafter's share of the pre-load reading, chosen before
    # the first run from an estimate of its weights (3.32 GiB: 1,782,641,920 bfloat16 parameters of
    # tests/plan/data/qwen3.6-27b-dflash plus make_models' fields; 3.32 / 94.24 rounded up: 0.6857 + 0.0352 ->
    # 0.725); measured there: 3.584 GiB (docs/results/regress.md), which 0.725 still covers
    "dflash-smoke-raised": {"model": "big", "free_gib": 94.24, "flags": SMOKE + ["--mem-fraction-static", "0.725"],
                            "expect": {"pristine": "ok"}},
    # the H200's own figures: all its free memory (no blocker), SGLang's own --mem-fraction-static
    # for the card, 16 running requests (issue 15)
    "h200-16": {"model": "big", "free_gib": None,
                "flags": BIG + ["--disable-radix-cache", "--mamba-scheduler-strategy", "no_buffer",
                                "--max-running-requests", "16"],
                "expect": {"pristine": "ok", "patched": ["ok"]}},
    # the RoPE pre-expansion after "Load weight end" (tools/sgl_overlay/harness/rope_reserve.py, docs/results/regress.md
    # "Where the logs' readings and the sizing's differ"): at the model's own 262,144-token context the release
    # grows the vision tower's RoPE cache to 262,400 rows and the text one's by 256: predicted 41,943,040 B
    # (40 MiB) between load_model's end reading and the sizing's; at 2,048 tokens nothing grows (0 B)
    "rope-262k": {"model": "big", "free_gib": None,
                  "flags": ROPE_FLAGS + ["--max-running-requests", "16"],
                  "expect": {"pristine": "ok", "patched": ["ok"]}},
    "rope-2k": {"model": "big", "free_gib": None,
                "flags": ROPE_FLAGS + ["--max-running-requests", "16", "--context-length", "2048"],
                "expect": {"pristine": "ok", "patched": ["ok"]}},
}

# what a plain run checks (issue 15); the rope-* and dflash-smoke-* cases are measurements, run by name
DEFAULT_CASES = ("dense", "zero-requests-dflash", "dflash-smoke", "h200-16")

BLOCKER = r'''
import sys, time, torch
target = float(sys.argv[1]) * (1 << 30)
free, total = torch.cuda.mem_get_info()
n = int(free - target)
x = torch.empty(max(n, 0), dtype=torch.uint8, device="cuda") if n > 0 else None
print(f"blocker: held {n / (1 << 30):.2f} GiB, free now {torch.cuda.mem_get_info()[0] / (1 << 30):.2f} GiB", flush=True)
time.sleep(100000)
'''


def start_blocker(free_gib):
    p = subprocess.Popen([sys.executable, "-c", BLOCKER, str(free_gib)], stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def _post(url, body, timeout=120):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def exercise(base):
    """A batch of varied-length greedy /generate requests and one streaming one."""
    out = {"n_requests": 0, "n_ok": 0, "outputs": []}
    lengths = [5, 37, 300, 1200]
    ids = [[(7 * i + 13 * n) % 20000 + 100 for i in range(n)] for n in lengths]
    sp = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
    t0 = time.time()
    try:
        res = json.loads(_post(base + "/generate", {"input_ids": ids, "sampling_params": sp}))
        out["n_requests"] = len(ids)
        out["outputs"] = [r.get("output_ids") for r in res]
        out["n_ok"] = sum(1 for r in res if len(r.get("output_ids") or []) == 16)
        out["batch_s"] = round(time.time() - t0, 2)
        chunks = _post(base + "/generate", {"input_ids": ids[1], "sampling_params": sp, "stream": True})
        data = [l[6:] for l in chunks.splitlines() if l.startswith("data: ")]
        out["stream_chunks"] = len(data)
        out["stream_ok"] = bool(data) and data[-1] == "[DONE]" and len(json.loads(data[-2]).get("output_ids", [])) >= 1
        out["requests_ok"] = out["n_ok"] == len(ids) and out["stream_ok"]
    except Exception as e:    # noqa: BLE001 - reported, not raised
        out["requests_ok"] = False
        out["request_error"] = f"{type(e).__name__}: {e}"[:500]
    return out


def run_server(tree, work, model, flags, prefix, port, start_timeout, common=COMMON, exercise_fn=None, probe=False,
               extra_env=None):
    """Start, exercise (exercise_fn(base) -> dict, default `exercise`), shut down, parse.
    probe: the allocation probe (tools/gpu/probe) records the pools and free-memory
    readings of the server's processes (run["probe"])."""
    log = Path(f"{prefix}.log.full")
    ledger = Path(f"{prefix}.ledger.json")
    probe_dir = Path(work) / "probe" / Path(prefix).name      # records go into e2e.json, not under --out
    path = f"{work / tree}:{work / 'deps'}" + (f":{work / 'stubs'}" if (work / "stubs").exists() else "")
    env = dict(os.environ, PYTHONPATH=path, SGLO_MEMORY_LEDGER=str(ledger),
               PYTHONUNBUFFERED="1")
    if probe:
        shutil.rmtree(probe_dir, ignore_errors=True)
        env.update(PYTHONPATH=f"{HERE / 'probe'}:{path}", SGLO_E2E_PROBE=str(probe_dir))
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--port", str(port),
           "--host", "127.0.0.1"] + common + flags
    t0 = time.time()
    with open(log, "w") as lf:
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    run = {"command": " ".join(cmd[1:]).replace(str(work), "$WORK"), "healthy": False}
    if extra_env:
        run["env"] = dict(extra_env)      # e2e_plan sizes with the same SGLANG_* settings
    base = f"http://127.0.0.1:{port}"
    while time.time() - t0 < start_timeout and p.poll() is None:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    run["healthy"] = True
                    break
        except Exception:    # noqa: BLE001
            time.sleep(2)
    run["start_s"] = round(time.time() - t0, 1)
    if run["healthy"]:
        run.update((exercise_fn or exercise)(base))
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(60)
            run["shutdown"] = "clean" if p.returncode in (0, -2, 130) else f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            run["shutdown"] = "killed after 60 s"
    else:
        run["exit_code"] = p.returncode
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    text = log.read_text(errors="replace")
    run["log_figures"] = parse_log(text)
    if ledger.exists():
        run["ledger"] = parse_ledger(ledger.read_text())
        run["ledger_raw"] = {k: v for k, v in json.loads(ledger.read_text()).items() if k in ("figures", "reservations")}
    if probe:
        run["probe"] = read_probe(probe_dir)
    # keep the log small: the lines the parser reads, and the last 60
    keep = [l for l in text.splitlines() if any(k in l for k in ("avail mem", "Cache is allocated", "max_total_num_tokens",
                                                                  "server_args=", "Error", "remedy:", "Memory ledger",
                                                                  "not found in params_dict", "Capture cuda graph",
                                                                  "DDTREE", "dtype"))]
    log.unlink()
    Path(f"{prefix}.log").write_text("\n".join(keep[:200] + ["..."] + text.splitlines()[-60:]) + "\n")
    return run


def read_probe(folder):
    """The allocation probe's records of every process of one server."""
    pools, free = [], []
    for f in sorted(Path(folder).glob("probe.*.json")):
        d = json.loads(f.read_text())
        pools += d["pools"]
        free += [dict(r, pid=d["pid"]) for r in d["free_readings"]]
    return {"pools": pools, "free_readings": free}


# --------------------------------------------------------------------------
# lossless speculation, CUDA graphs on and off, the ledger against the allocator
# (small models with real weights written here: e2e_models)

def lossless_runs():
    """Every run, in the order they are worth device time (a budget cuts the tail):
    the patched tree first (the product), eager before graphs; the reference of
    each (model, tree) is its non-speculative eager run."""
    R = []

    def add(model, tree, spec, graphs, refusal=None):
        R.append({"id": f"{model}.{tree}.{(spec or 'base').lower()}.{'graphs' if graphs else 'eager'}",
                  "model": model, "tree": tree, "spec": spec, "graphs": graphs,
                  "expect": "refused" if refusal else "ok", "refusal": refusal})
    for model, specs in (("dense", (None, "DFLASH")), ("hybrid", (None, "DFLASH", "DDTREE"))):
        for spec in specs:
            add(model, "patched", spec, False)
    # DDTREE's target verify runs in CUDA graphs captured with its tree input (ddtree-cuda-graph.patch)
    add("hybrid", "patched", "DDTREE", True)
    add("dense", "patched", "DDTREE", False)
    add("dense", "patched", "DDTREE", True)
    add("dense", "patched", "DFLASH", True)
    add("hybrid", "patched", "DFLASH", True)
    for model in ("dense", "hybrid"):
        add(model, "pristine", None, False)
        add(model, "pristine", "DFLASH", False)
    for model in ("dense", "hybrid"):
        add(model, "patched", None, True)
    add("dense", "pristine", "DFLASH", True)
    add("hybrid", "pristine", "DFLASH", True)
    return R


# greedy sampling is an argmax in either backend; the pytorch one needs no JIT compilation (flashinfer's
# sampling kernels are compiled on first use when the bundle carries no cubins)
PLAN_KEYS = ("id", "model", "tree", "spec", "graphs", "expect", "refusal")
LOSSLESS_COMMON = ["--skip-tokenizer-init", "--attention-backend", "triton", "--disable-piecewise-cuda-graph",
                   "--sampling-backend", "pytorch",
                   "--log-level", "info", "--random-seed", "0", "--mem-fraction-static", "0.25",
                   "--context-length", "4096", "--max-running-requests", "32"]


def lossless_flags(run, models, dtype):
    # graphs for one request, a few, and the whole batch of prompts (fewer captures than the default list)
    f = ["--dtype", dtype] + (["--cuda-graph-bs", "1", "4", "32"] if run["graphs"] else ["--disable-cuda-graph"])
    if run["model"] == "hybrid":
        f += ["--mm-attention-backend", "triton_attn", "--disable-radix-cache", "--mamba-scheduler-strategy", "no_buffer"]
    if run["spec"]:
        f += ["--speculative-algorithm", run["spec"], "--speculative-draft-model-path", str(models[run["model"] + "-draft"])]
    if run["spec"] == "DDTREE":
        f += ["--disable-overlap-schedule"]
    return f


def lossless_env(dtype):
    """float32: SGLang's custom ops run their torch forward_native (the probe's native_ops; the
    sgl_kernel CUDA kernels dispatch only fp16/bf16); the Mamba conv states are float32
    (SGLANG_MAMBA_CONV_DTYPE, bfloat16 by default whatever --dtype says: the Triton causal conv1d
    kernels do not compile for float32 activations on bfloat16 states); every Triton tl.dot is
    IEEE float32 (TRITON_F32_DEFAULT=ieee, TF32 otherwise: on the H200, triton 3.6, a 64x64 dot's max
    error against float64 is 7.6e-6 with it, 0.024 without; the GDN chunk path's merge dots follow
    it with float32-gdn-chunk.patch). docs/results/gpu.md, "What float32 needed"."""
    if dtype != "float32":
        return {}
    return {"SGLO_E2E_NATIVE_OPS": "1", "SGLANG_MAMBA_CONV_DTYPE": "float32", "TRITON_F32_DEFAULT": "ieee"}


def _generate(base, body):
    return json.loads(_post(base + "/generate", body, timeout=300))


def exercise_lossless(base, ps, reference):
    """The prompts singly, then as one batch; a reference also sends the batch with
    top-2 log-probabilities (the margins of a mismatch) and one streaming request."""
    sp = {"temperature": 0, "max_new_tokens": lossless.MAX_NEW, "ignore_eos": True}
    out = {"requests_ok": False}
    try:
        t0 = time.time()
        single = [_generate(base, {"input_ids": p, "sampling_params": sp}) for p in ps]
        out["single_s"] = round(time.time() - t0, 2)
        t0 = time.time()
        batch = _generate(base, {"input_ids": ps, "sampling_params": sp})
        out["batch_s"] = round(time.time() - t0, 2)
        out["single"] = [r["output_ids"] for r in single]
        out["batch"] = [r["output_ids"] for r in batch]
        out["acceptance"] = {"single": lossless.acceptance([r["meta_info"] for r in single]),
                             "batch": lossless.acceptance([r["meta_info"] for r in batch])}
        if reference:
            lp = _generate(base, {"input_ids": ps, "sampling_params": sp, "return_logprob": True, "top_logprobs_num": 2})
            out["logprob_batch"] = [r["output_ids"] for r in lp]
            out["margins"] = [[None if m is None else float(f"{m:.4g}") for m in row]
                              for row in lossless.margins([r["meta_info"] for r in lp])]
        chunks = _post(base + "/generate", {"input_ids": ps[3], "sampling_params": sp, "stream": True})
        data = [l[6:] for l in chunks.splitlines() if l.startswith("data: ")]
        out["stream_ok"] = bool(data) and data[-1] == "[DONE]" and \
            json.loads(data[-2]).get("output_ids", [])[-1:] == out["single"][3][-1:]
        out["requests_ok"] = all(len(o) == lossless.MAX_NEW for o in out["single"] + out["batch"]) and out["stream_ok"]
    except Exception as e:    # noqa: BLE001 - reported, not raised
        out["request_error"] = f"{type(e).__name__}: {e}"[:500]
    return out


def check_lossless(runs):
    """Each run against its (model, tree) reference (non-speculative, eager): single and
    batch outputs token for token; references across trees; ledger = allocated bytes."""
    refs = {(r["model"], r["tree"]): r for r in runs if r.get("spec") is None and not r["graphs"] and r.get("single")}
    for r in runs:
        chk, noise = {}, None
        if r.get("resumed") and r.get("check") and r is not refs.get((r["model"], r["tree"])):
            continue
        if r.get("skipped"):
            r["check"] = {"pass": None, "why": [r["skipped"]]}
            continue
        o = outcome(r)
        if r.get("refusal"):     # a deliberate start-up refusal (ValueError naming the flag)
            ok = not r.get("healthy") and any(r["refusal"] in e for e in r["log_figures"]["errors"])
            why = [f"refused at start-up: {r['refusal']!r}" if ok else f"{o}, expected the refusal {r['refusal']!r}"]
        else:
            ok = o == "ok"
            errs = r.get("log_figures", {}).get("errors") or []
            why = [o + (f": {errs[-1][:200]}" if o != "ok" and errs else "")
                   + (f" (float32 exited first: {r['float32_failed'][:120]})" if r.get("float32_failed") else "")]
        ref = refs.get((r["model"], r["tree"]))
        if r.get("single") and ref:
            m = ref.get("margins")
            noise = lossless.reference_noise(ref["single"], ref.get("batch") or ref["single"], m)
            for kind in ("single", "batch"):
                c = lossless.compare(ref["single"], r[kind], m, noise=noise)
                chk[kind] = c
                # the reference's own batch divergence is what defines the noise: reported, not judged
                ok &= c["lossless"] or (r is ref and kind == "batch")
                near = sum(1 for x in c["mismatches"] if x.get("within_noise"))
                why.append(f"{kind}: {'equal' if c['equal'] else str(len(c['mismatches'])) + ' requests differ'} "
                           f"({c['n']} requests, {c['tokens']} tokens"
                           + (f"; {near} first divergence(s) at a reference margin <= {noise:g}, the same "
                              f"server's own single-vs-batch noise" if near else "") + ")")
            if r is ref and r.get("logprob_batch"):
                c = lossless.compare(ref["single"], r["logprob_batch"], m, noise=noise)
                chk["logprob_batch"] = c
                ok &= c["lossless"]
            other = refs.get((r["model"], "patched"))
            if r is ref and other and r["tree"] == "pristine":
                c = lossless.compare(other["single"], r["single"], other.get("margins"))
                chk["pristine_vs_patched"] = c
                ok &= c["equal"]
                why.append(f"pristine reference {'=' if c['equal'] else '!='} patched reference")
        elif r.get("single") and not ref:
            ok = False          # served, but nothing to judge it against: not a pass
            why.append("no reference run to compare with")
        if r.get("healthy") and not r.get("requests_ok"):
            ok = False
            why.append(f"requests failed: {r.get('request_error', 'wrong lengths or stream')}")
        if r.get("pools_vs_ledger") is not None:
            ok &= pools_mod.equal(r["pools_vs_ledger"])
            why.append(pools_mod.summary(r["pools_vs_ledger"]))
        r["check"] = {"pass": bool(ok), "why": why, "compare": chk, "reference_noise": noise}
    return runs


def lossless_table(runs):
    rows = ["| run | dtype | outcome | single | batch | accept length (single / batch) | ledger vs allocated | start s |",
            "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if r.get("skipped"):
            rows.append(f"| {r['id']} | | skipped ({r['skipped']}) | | | | | |")
            continue
        c = r.get("check", {}).get("compare", {})
        cell = {k: ("=" if c[k]["equal"] else f"{len(c[k]['mismatches'])} differ") if k in c else "" for k in ("single", "batch")}
        acc = r.get("acceptance") or {}
        al = " / ".join(str((acc.get(k) or {}).get("accept_length", "-")) for k in ("single", "batch")) if r.get("spec") else ""
        led = ""
        if r.get("pools_vs_ledger") is not None:
            led = "equal" if pools_mod.equal(r["pools_vs_ledger"]) else "DIFFERS"
        o = "refused" if r.get("refusal") and r.get("check", {}).get("pass") else outcome(r)
        rows.append(f"| {r['id']} | {r.get('dtype', '')} | {o} | {cell['single']} | "
                    f"{cell['batch']} | {al} | {led} | {r.get('start_s', '')} |")
    rows.append("")
    for r in runs:
        ch = r.get("check", {})
        verdict = {True: "PASS", False: "FAIL", None: "SKIP"}[ch.get("pass")]
        rows.append(f"- {r['id']}: {verdict}: " + "; ".join(ch.get("why", [])))
        for k, c in ch.get("compare", {}).items():
            for m in c["mismatches"][:3]:
                rows.append(f"  - {k} request {m['request']} position {m.get('position')}: reference {m.get('reference')}, "
                            f"got {m.get('got')}, reference margin {m.get('margin')}")
    return "\n".join(rows) + "\n"


def make_lossless_models(work, out, device="cuda"):
    """Targets and drafters with real weights, written on this machine (e2e_models),
    with the bundle's transformers; their config.json files are copied to out/models."""
    d = work / "models"
    names = ("dense", "hybrid", "dense-draft", "hybrid-draft")
    models = {k: d / k for k in names}
    if all((p / "model.safetensors").exists() and (p / "config.json").exists() for p in models.values()):
        record_configs(models, out)       # a previous call on this machine wrote them (same seeds)
        return models, {"reused": True, "sha256": _digests(models)}
    code = ("import json, sys, e2e_models as m\n"
            "d = sys.argv[1]\n"
            "dev = sys.argv[2]\n"
            "n = {'dense': m.write_target(d + '/dense', m.DENSE, dev), 'hybrid': m.write_target(d + '/hybrid', m.HYBRID, dev)}\n"
            "m.write_drafter(d + '/dense-draft', m.drafter_config(m.DENSE), dev)\n"
            "m.write_drafter(d + '/hybrid-draft', m.drafter_config(m.HYBRID), dev)\n"
            "print(json.dumps(n))\n")
    extra = os.environ.get("PYTHONPATH")
    r = subprocess.run([sys.executable, "-c", code, str(d), device], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=f"{HERE}:{work / 'deps'}" + (f":{extra}" if extra else "")))
    if r.returncode != 0:
        raise SystemExit(f"e2e: writing the lossless models failed:\n{r.stderr[-3000:]}")
    _processor(models["hybrid"], work)
    record_configs(models, out)
    return models, {"parameters": json.loads(r.stdout.strip().splitlines()[-1]), "sha256": _digests(models)}


def _digests(models):
    """sha256 of each checkpoint: the same weights across calls and machines, or not."""
    return {k: hashlib.sha256((p / "model.safetensors").read_bytes()).hexdigest()[:16] for k, p in models.items()}


def run_lossless(selection, work, out, budget_s, t0, start_timeout, dtype, port, save=lambda part: None, clock=time.time,
                 weights_device="cuda", resume=None, fallback=True):
    """The lossless runs in order while the budget lasts; save(part) after each run.
    resume: a previous report's "lossless" part: its passed runs are kept as they are (the
    references with their outputs), the rest (skipped or failed) is run and compared with them.
    fallback: a reference that cannot start in float32 is retried in bfloat16 (False: it fails)."""
    models, params = make_lossless_models(work, out, weights_device)
    ps = lossless.prompts(id_max=models_mod.PROMPT_ID_MAX)
    # kept: passed runs, and references that served (their outputs are what the others are judged against)
    done = {r["id"]: r for r in (resume or {}).get("runs", [])
            if (r.get("check") or {}).get("pass") or (r.get("spec") is None and not r.get("graphs")
                                                       and r.get("single") and r.get("requests_ok"))}
    if resume and resume.get("params", {}).get("sha256") not in (None, params.get("sha256")):
        raise SystemExit("e2e: --resume: the previous call's weights differ from this machine's (sha256 of the "
                         "checkpoints); run everything again without --resume")
    runs = [dict(done[r["id"]], resumed=True) if r["id"] in done else r
            for r in lossless_runs() if selection == "all" or r["id"] in selection.split(",") or r["id"] in done]
    dtypes = {"dense": dtype, "hybrid": dtype}
    dtypes.update({r["model"]: r["dtype"] for r in done.values() if r.get("spec") is None and not r["graphs"]})
    took = []
    for r in runs:
        if r.get("resumed"):
            continue
        left = budget_s - (clock() - t0)
        # the first start pays the JIT compilation; later ones are estimated from the others
        need = max(took[1:]) if len(took) > 1 else (took[0] if took else 90)
        if left < need + 15:
            r["skipped"] = f"budget: {left:.0f} s left, a run takes ~{need:.0f} s"
            continue
        port += 1
        started = clock()
        ref = r["spec"] is None and not r["graphs"]
        for attempt in (0, 1):
            r["dtype"] = dtypes[r["model"]]
            flags = lossless_flags(r, models, r["dtype"])
            r["start_timeout"] = min(start_timeout, max(30, left - 20))
            res = run_server(r["tree"], work, models[r["model"]], flags, out / f"{r['id']}.{r['dtype']}", port,
                             r["start_timeout"], common=LOSSLESS_COMMON,
                             exercise_fn=lambda base: exercise_lossless(base, ps, ref), probe=True,
                             extra_env=lossless_env(r["dtype"]))
            for k in [k for k in r if k not in PLAN_KEYS]:     # nothing of a previous attempt stays
                if k not in ("dtype", "start_timeout", "float32_failed"):
                    del r[k]
            r.update(res)
            # float32 is the honest comparison; if this tree cannot serve the model in float32, say so
            # and fall back to bfloat16 (mismatches then carry their margins)
            # (a server that exited at start-up; a start that timed out is not retried)
            if ref and not r["healthy"] and "exit_code" in r and r["dtype"] == "float32" and attempt == 0 \
                    and fallback:
                r["float32_failed"] = (r["log_figures"]["errors"] or ["no error line"])[-1][:300]
                dtypes[r["model"]] = "bfloat16"
                port += 1
                continue
            break
        if r["tree"] == "patched" and r.get("ledger_raw") and r.get("probe"):
            r["pools_vs_ledger"] = pools_mod.compare(r["ledger_raw"], r["probe"]["pools"])
        took.append(clock() - started)
        print(f"[e2e {clock() - t0:6.1f}s] {r['id']} ({r['dtype']}): {outcome(r)} "
              f"{r['log_figures']['errors'][-1:]} start {r.get('start_s')} s", flush=True)
        save({"params": params, "runs": runs})
    check_lossless(runs)
    # keep the report small: outputs only for the references (the others: their comparison)
    for r in runs:
        if not (r.get("spec") is None and not r["graphs"]):
            for k in ("single", "batch"):
                r.pop(k, None)
    return {"params": params, "prompts": [len(p) for p in ps], "runs": runs}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", default=str(ROOT / "build" / "bundle"))
    ap.add_argument("--work", default="/tmp/sglo-e2e")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES),
                    help=f"comma-separated, of {', '.join(CASES)} (default: {', '.join(DEFAULT_CASES)})")
    ap.add_argument("--trees", default="pristine,patched")
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--lossless", default="", help="'all' or run ids (e2e.lossless_runs): lossless speculation, "
                    "CUDA graphs on/off, ledger vs allocated bytes, on small models with real weights")
    ap.add_argument("--budget-s", type=float, default=1e9,
                    help="wall-clock budget from the start; lossless runs that would not fit are skipped and reported")
    ap.add_argument("--dtype", default="float32",
                    help="the lossless runs' --dtype (float32, the default: token-for-token comparable; it needs "
                         "the stack's float32 patches and sets lossless_env: docs/results/gpu.md, 'What float32 needed'; "
                         "bfloat16 flips near-ties, judged against the reference's own noise)")
    ap.add_argument("--no-dtype-fallback", action="store_true",
                    help="a reference that exits at start-up in float32 fails instead of being retried in bfloat16")
    ap.add_argument("--weights-device", default="cuda", help="where the lossless models' weights are generated")
    ap.add_argument("--resume", default=None, help="a previous call's e2e.json: its completed lossless runs are kept "
                    "and the others run (several device calls make one report)")
    args = ap.parse_args(argv)
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": sys.version.split()[0], "cases": []}
    try:    # (a later call on the same machine may reuse --work without the bundle)
        manifest = json.loads((Path(args.bundle) / "bundle.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    if manifest.get("release") and not manifest.get("patched_wheel") and "patched" in args.trees.split(","):
        raise SystemExit(f"e2e: {args.bundle} is a pristine bundle of sglang {manifest.get('release')} "
                         "(tools/bundle.py --release): it has no patched tree; run it with --trees pristine")
    report["release"] = manifest.get("release")
    if not (work / "pristine" / "sglang").exists():
        shutil.rmtree(work, ignore_errors=True)
        report["install"] = install(args.bundle, work)
    report["install_s"] = round(time.time() - t0, 1)
    report["patched_wheel"] = manifest.get("patched_wheel")  # which stack (its local version names its digest)
    try:
        import torch
        report["torch"] = torch.__version__
        report["gpu"] = torch.cuda.get_device_name(0)
        report["gpu_total_gib"] = round(torch.cuda.mem_get_info()[1] / GIB, 2)
        report["gpu_total_bytes"], report["gpu_free_bytes_at_start"] = torch.cuda.mem_get_info()[1], torch.cuda.mem_get_info()[0]
    except Exception as e:    # noqa: BLE001
        report["torch"] = f"unavailable: {e}"
    models = make_models(work)
    record_configs(models, out)
    port = 30123
    for name in [c for c in args.cases.split(",") if c]:
        case = CASES[name]
        # the drafter of a DFLASH case: its config.json alone (make_models)
        case_flags = case["flags"] + (["--speculative-draft-model-path", str(models["draft"])]
                                      if "DFLASH" in case["flags"] else [])
        c = {"name": name, "flags": case["flags"], "runs": {}}
        blocker, note = (start_blocker(case["free_gib"]) if case["free_gib"] else (None, None))
        c["blocker"] = note
        try:
            for tree in args.trees.split(","):
                port += 1
                r = run_server(tree, work, models[case["model"]], case_flags, out / f"{name}.{tree}", port, args.start_timeout,
                               probe=True)
                if r.get("ledger_raw") and r.get("probe"):
                    r["pools_vs_ledger"] = pools_mod.compare(r["ledger_raw"], r["probe"]["pools"])
                c["runs"][tree] = r
                print(f"[e2e {time.time() - t0:6.1f}s] {name} {tree}: {outcome(r)} {r['log_figures']['errors'][-1:]}", flush=True)
                if tree == "patched" and outcome(r) == "refused" and r["log_figures"]["remedies"]:
                    rem = r["log_figures"]["remedies"][0]
                    flags = list(case_flags)
                    f = "--" + rem["flag"]
                    if f in flags:
                        flags[flags.index(f) + 1] = rem["value"]
                    else:
                        flags += [f, rem["value"]]
                    port += 1
                    rr = run_server(tree, work, models[case["model"]], flags, out / f"{name}.patched+remedy", port,
                                    args.start_timeout, probe=True)
                    if rr.get("ledger_raw") and rr.get("probe"):
                        rr["pools_vs_ledger"] = pools_mod.compare(rr["ledger_raw"], rr["probe"]["pools"])
                    c["runs"]["patched+remedy"] = rr
                    print(f"[e2e {time.time() - t0:6.1f}s] {name} patched+remedy ({f} {rem['value']}): {outcome(rr)}", flush=True)
        finally:
            if blocker:
                blocker.kill()
                blocker.wait()
        c["check"] = check_case(case, c["runs"])
        report["cases"].append(c)
        (out / "e2e.json").write_text(json.dumps(report, indent=1) + "\n")
    ok = all(c["check"]["pass"] for c in report["cases"])
    md = table(report) if report["cases"] else ""
    if args.lossless:
        def save(part):
            report["lossless"] = part
            (out / "e2e.json").write_text(json.dumps(report, indent=1) + "\n")
        report["lossless"] = run_lossless(args.lossless, work, out, args.budget_s, t0, args.start_timeout, args.dtype,
                                          port, save, weights_device=args.weights_device,
                                          resume=json.loads(Path(args.resume).read_text()).get("lossless")
                                          if args.resume else None, fallback=not args.no_dtype_fallback)
        report["lossless"]["ddtree_pristine"] = "not available on the pin: v0.5.12.post1 has no DDTREE algorithm"
        md += "\n" + lossless_table(report["lossless"]["runs"])
        ok &= all(r["check"]["pass"] for r in report["lossless"]["runs"])    # a skipped run is not a pass
    report["total_s"] = round(time.time() - t0, 1)
    (out / "e2e.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "e2e.md").write_text(md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
