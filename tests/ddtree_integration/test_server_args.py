"""Patch ddtree-algorithm: `--speculative-algorithm DDTREE` registered through the
pin's registry, `--speculative-ddtree-budget`, `--speculative-ddtree-chain-batch`,
and the start-up rules.

Runs the tree's own ServerArgs.add_cli_args, _handle_grammar_backend and
arg_groups/speculative_hook.handle_speculative_decoding (the registry's validator
hook and the algorithm's handle_server_args hook) through the regression
harness's targeted loader.  Each check raises AssertionError
when the behaviour is absent: it fails on the pristine pin and passes patched.
On the pin the overlay's DDTREE modules are absent too; on the series without
the patch (fixture ``stack_without``) they are in the tree, and DDTREE is still
unknown and its budget flag refused: the patch's hunks are what reach them.
"""

import pytest

from tests.ddtree_integration.run import probe

BASE = [
    "--speculative-algorithm", "DDTREE",
    "--speculative-draft-model-path", "z-lab/Qwen3-8B-DFlash-b16",
    "--speculative-dflash-block-size", "16",
    "--grammar-backend", "none",
    "--disable-cuda-graph",
    "--attention-backend", "flashinfer",
]


def without(flag, argv=BASE, takes_value=True):
    i = argv.index(flag)
    return argv[:i] + argv[i + 1 + int(takes_value):]


# (command line, substrings the refusal must contain): each names the thing and the remedy.
REFUSALS = {
    "grammar": (without("--grammar-backend") + ["--grammar-backend", "outlines"],
                ["grammar-constrained decoding (--grammar-backend outlines)", "--grammar-backend none"]),
    "attention": (BASE[:-1] + ["fa3"], ["attention backend fa3", "--attention-backend flashinfer"]),
    "page-size": (BASE + ["--page-size", "16"], ["--page-size 16", "--page-size 1"]),
    "threshold": (BASE + ["--speculative-accept-threshold-single", "0.5"], ["lossy", "1.0"]),
    "num-draft-tokens": (BASE + ["--speculative-num-draft-tokens", "16"], ["--speculative-num-draft-tokens 16", "--speculative-ddtree-budget"]),
    "topk": (BASE + ["--speculative-eagle-topk", "4"], ["--speculative-eagle-topk 4"]),
    "budget": (BASE + ["--speculative-ddtree-budget", "0"], ["--speculative-ddtree-budget must be >= 1"]),
    "chain-batch": (BASE + ["--speculative-ddtree-chain-batch", "0"],
                    ["--speculative-ddtree-chain-batch must be >= 1", "tools.gpu.spec_value chain-batch"]),
    "adaptive-and-chain-batch": (BASE + ["--speculative-ddtree-adaptive", "--speculative-ddtree-chain-batch", "8"],
                                 ["--speculative-ddtree-adaptive and --speculative-ddtree-chain-batch 8",
                                  "Pass one of them"]),
    "adaptive-tp": (BASE + ["--speculative-ddtree-adaptive", "--tp-size", "2"],
                    ["--speculative-ddtree-adaptive is not supported", "--tp-size 2",
                     "--speculative-ddtree-chain-batch K"]),
    "budget-below-block": (BASE + ["--speculative-ddtree-budget", "7"], ["--speculative-ddtree-budget 7", "at least 15"]),
    "hidden-states": (BASE + ["--enable-return-hidden-states"], ["--enable-return-hidden-states"]),
    "rejection-sampling": (BASE + ["--speculative-use-rejection-sampling"],
                           ["--speculative-use-rejection-sampling", "target-only"]),
    "lazy-mamba-track": (BASE + ["--mamba-radix-cache-strategy", "extra_buffer_lazy"],
                         ["extra_buffer_lazy", "--mamba-radix-cache-strategy extra_buffer"]),
}


def check_registration(tree):
    r = probe(tree, "algorithm")
    assert r["ok"], f"DDTREE is not a speculative algorithm of {tree}: {r.get('message')}"
    v = r["value"]
    assert v["class"] == "DDTreeSpecAlgo" and v["name"] == "DDTREE", v
    # DFlash's drafter: every DFlash-family branch (aux-hidden capture, draft KV sizing,
    # the overlap scheduler's KV reservation) applies
    assert v["is_dflash"] and v["is_dflash_family"] and v["is_ddtree"] and not v["is_eagle"], v
    assert v["supports_target_verify_for_draft"], "the drafter's block forward runs in TARGET_VERIFY mode"
    # what the scheduler asks of the configured algorithm (create_future_map, need_topk, ...)
    assert v["missing_methods"] == [], f"DDTreeSpecAlgo lacks {v['missing_methods']} of SpeculativeAlgorithm"
    assert v["need_topk"] is False, v
    assert v["verify_width"] == {"target": 64, "drafter": 16}, v["verify_width"]
    assert v["has_validator"] and v["supports_overlap"] is True, v
    assert v["overlap_worker"] == "DDTreeWorker", f"with overlap on (the default): {v['overlap_worker']}"


# SGLang's default flags for grammar (no --grammar-backend: xgrammar at the pin):
# DDTREE starts with grammar turned off (a warning; grammar requests refused one by one)
DEFAULT_GRAMMAR = without("--grammar-backend")
# CUDA graphs on (no --disable-cuda-graph): the target's verify graphs are captured
# with the tree input (test_graphs.py), so DDTREE starts
GRAPHS = without("--disable-cuda-graph", takes_value=False)


# overlap off: the same worker, driven synchronously
NO_OVERLAP = BASE + ["--disable-overlap-schedule"]
# GDN decode on FlashInfer: the tree verify takes the Triton kernel (sgl-project/sglang#29734)
GDN_FLASHINFER = BASE + ["--linear-attn-decode-backend", "flashinfer"]


def check_rules(tree):
    argvs = [BASE + ["--speculative-ddtree-budget", "63", "--speculative-ddtree-chain-batch", "8"], BASE,
             DEFAULT_GRAMMAR, GRAPHS, NO_OVERLAP, GDN_FLASHINFER, BASE + ["--speculative-ddtree-adaptive"]]
    argvs += [argv for argv, _ in REFUSALS.values()]
    results = probe(tree, "server_rules_many", argvs=argvs)
    assert results["ok"], results
    res = results["value"]
    assert res[0]["ok"], f"DDTREE with budget 63 was refused: {res[0]}"
    v = res[0]["value"]
    assert v["speculative_ddtree_budget"] == 63
    assert v["speculative_ddtree_chain_batch"] == 8, "the chain batch size is kept for the worker"
    assert v["speculative_dflash_block_size"] == 16, "the drafter's block must be kept"
    assert v["speculative_num_draft_tokens"] == 64, "verify width (and every sizing of it) = budget + 1"
    assert v["speculative_eagle_topk"] == 2 and v["speculative_num_steps"] == 1, v
    assert v["disable_overlap_schedule"] is False, "the overlap scheduler stays on (SGLang's default)"
    assert v["max_running_requests"] == 48, v
    assert res[1]["ok"], res[1]
    assert res[1]["value"]["speculative_ddtree_budget"] == 15, "default budget = block - 1"
    assert res[1]["value"]["speculative_num_draft_tokens"] == 16
    assert res[1]["value"]["speculative_ddtree_chain_batch"] is None, "no chain batch unless asked: always the tree"
    assert res[2]["ok"], f"DDTREE with SGLang's default grammar backend was refused: {res[2]}"
    assert res[2]["value"]["grammar_backend"] == "none", res[2]
    assert res[3]["ok"], f"DDTREE with CUDA graphs was refused: {res[3]}"
    assert res[3]["value"]["disable_cuda_graph"] is False, res[3]
    assert res[4]["ok"] and res[4]["value"]["disable_overlap_schedule"] is True, res[4]
    assert res[5]["ok"] and res[5]["value"]["linear_attn_decode_backend"] == "flashinfer", res[5]
    assert res[1]["value"]["speculative_ddtree_adaptive"] is False, "no adaptive choice unless asked"
    assert res[6]["ok"] and res[6]["value"]["speculative_ddtree_adaptive"] is True, res[6]
    assert res[6]["value"]["speculative_ddtree_chain_batch"] is None, res[6]
    for (name, (_, needles)), r in zip(REFUSALS.items(), res[7:]):
        assert not r["ok"] and r["type"] == "ValueError", f"{name}: not refused: {r}"
        for needle in needles:
            assert needle in r["message"], f"{name}: refusal {r['message']!r} lacks {needle!r}"


def test_registration_patched(patched_tree):
    check_registration(patched_tree)


def test_registration_absent_on_pristine(pristine_tree):
    with pytest.raises(AssertionError, match=r"DDTREE is not a speculative algorithm of .*: Unknown speculative algorithm name: ddtree"):
        check_registration(pristine_tree)


def test_rules_patched(patched_tree):
    check_rules(patched_tree)


def test_rules_absent_on_pristine(pristine_tree):
    with pytest.raises(AssertionError, match=r"DDTREE with budget 63 was refused: .*DDTREE"):
        check_rules(pristine_tree)


PATCH = "ddtree-algorithm.patch"


def test_overlay_alone_registers_nothing_without_the_patch(stack_without):
    tree = stack_without(PATCH)
    assert (tree / "python/sglang/srt/speculative/ddtree_algo.py").is_file(), "the overlay's module must be there"
    with pytest.raises(AssertionError, match=r"DDTREE is not a speculative algorithm of .*: "
                                             r"Unknown speculative algorithm name: ddtree"):
        check_registration(tree)
    r = probe(tree, "server_rules_many", argvs=[BASE + ["--speculative-ddtree-budget", "63"], BASE])
    budget, default = r["value"]
    assert not budget["ok"] and budget["message"].startswith("argparse refused"), budget
    assert "error: unrecognized arguments: --speculative-ddtree-budget 63" in r["stderr_tail"], r["stderr_tail"][-300:]
    assert not default["ok"] and default["message"] == "Unknown speculative algorithm name: DDTREE", default
    r = probe(tree, "server_rules_many", argvs=[BASE + ["--speculative-ddtree-chain-batch", "8"]])
    assert not r["value"][0]["ok"], r["value"][0]
    assert "error: unrecognized arguments: --speculative-ddtree-chain-batch 8" in r["stderr_tail"], r["stderr_tail"][-300:]
