"""The oracle's facts about each release, checked against the release's source.

``oracle.py`` encodes, per release, which sizing rule applies (e.g. the Mamba
pool's padding slot is counted from v0.5.17).  Each such fact was read by hand
in the release's code; here each is tied to a marker in that code, for every
release v0.5.5-v0.5.23, so a wrong release boundary fails.  The source is read
as text (ast): neither SGLang nor the harness is imported.
"""

import ast
from pathlib import Path

import pytest

from . import oracle
from .conftest import ALL_RELEASES

SIZING_FILES = ("model_executor/model_runner_kv_cache_mixin.py", "mem_cache/kv_cache_configurator.py",
                "model_executor/model_runner.py")


def _text(root: Path, rel: str) -> str:
    p = root / "sglang" / "srt" / rel
    return p.read_text(encoding="utf-8") if p.is_file() else ""


def _function(src: str, name: str) -> str:
    """The source of every function ``name`` of a file (methods included)."""
    if not src:
        return ""
    return "\n".join(ast.get_source_segment(src, n) for n in ast.walk(ast.parse(src))
                     if isinstance(n, ast.FunctionDef) and n.name == name)


def _sizing(root: Path, name: str) -> str:
    """The function ``name`` of the release's sizing file (the era's entry)."""
    for rel in SIZING_FILES[:2]:
        found = _function(_text(root, rel), name)
        if found:
            return found
    return _function(_text(root, SIZING_FILES[2]), name)


def _dflash_turns_overlap_off(root: Path) -> bool:
    """DFLASH's flag rule sets disable_overlap_schedule: the DFLASH branch of
    ServerArgs._handle_speculative_decoding (to v0.5.12.post1), or
    arg_groups/speculative_hook._handle_dflash (v0.5.13+)."""
    hook = _function(_text(root, "arg_groups/speculative_hook.py"), "_handle_dflash")
    if hook:
        return "disable_overlap_schedule = True" in hook
    src = _text(root, "server_args.py")
    for fn in ast.walk(ast.parse(src)):
        if isinstance(fn, ast.FunctionDef) and fn.name == "_handle_speculative_decoding":
            for node in ast.walk(fn):
                if isinstance(node, ast.If) and ast.get_source_segment(src, node.test).endswith('== "DFLASH"'):
                    if any("disable_overlap_schedule = True" in ast.get_source_segment(src, b) for b in node.body):
                        return True
    return False


def _drafter_starts_before_sizing(root: Path) -> bool:
    """``Scheduler.init_model_worker`` calls ``self.maybe_init_draft_worker()`` before
    ``self.init_memory_pools()`` (v0.5.14+); up to v0.5.13.post1 it has no
    ``init_memory_pools`` call: the target's ``ModelRunner`` sizes its pools while it
    starts, before the scheduler starts the drafter."""
    fn = _function(_text(root, "managers/scheduler.py"), "init_model_worker")
    draft, pools = fn.find("self.maybe_init_draft_worker()"), fn.find("self.init_memory_pools()")
    return 0 <= draft < pools


# fact -> (since, marker in the release's code)
def _old_flags_dropped(r) -> bool:
    """The parser has --mamba-radix-cache-strategy and no longer declares --mamba-scheduler-strategy."""
    files = [r / "sglang/srt/server_args.py", *(r / "sglang/srt/arg_groups").rglob("*.py")]
    text = "".join(p.read_text(encoding="utf-8") for p in files if p.is_file())
    return "mamba_radix_cache_strategy" in text and '"--mamba-scheduler-strategy"' not in text


FACTS = {
    "QWEN35_SINCE": lambda r: (r / "sglang/srt/configs/qwen3_5.py").is_file(),
    "DFLASH_SINCE": lambda r: "DFLASH" in _text(r, "speculative/spec_info.py"),
    "VALUE_SINCE": lambda r: "Raise --mem-fraction-static above" in (
        _sizing(r, "_profile_available_bytes") or _sizing(r, "profile_max_num_token")),
    "CAPPED_SINCE": lambda r: "capped_reqs" in (
        _sizing(r, "_handle_max_mamba_cache") or _sizing(r, "handle_max_mamba_cache")),
    "PADDED_SINCE": lambda r: "(capped_reqs + 1)" in _sizing(r, "_handle_max_mamba_cache"),
    "RUNTIME_REFUSAL_SINCE": lambda r: "state cache is too small to serve" in (
        _sizing(r, "resolve_max_num_reqs") or _sizing(r, "_resolve_max_num_reqs")),
    "REQS_BY_TOKENS_SINCE": lambda r: "min(requested_per_worker, token_capacity // 2)" in (
        _sizing(r, "resolve_max_num_reqs") or _sizing(r, "_resolve_max_num_reqs")),
    "OVERLAP_KEPT_SINCE": lambda r: "DFLASH" in _text(r, "speculative/spec_info.py")
    and not _dflash_turns_overlap_off(r),
    "DRAFTER_FIRST_SINCE": _drafter_starts_before_sizing,
    "OLD_FLAGS_REFUSED_SINCE": _old_flags_dropped,
    "MM_RESERVE_SINCE": lambda r: "mm_runtime_reservation_gb" in _sizing(r, "_profile_available_bytes")
    and "SGLANG_VLM_CACHE_SIZE_MB = EnvInt(100)" in _text(r, "environ.py"),
}


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_release_facts_match_its_code(release_tree, version):
    root = release_tree(version)
    wrong = {}
    for fact, marker in FACTS.items():
        expected = oracle.version(version) >= getattr(oracle, fact)
        if marker(root) != expected:
            wrong[fact] = f"oracle says {expected}, the code says {not expected}"
    assert not wrong, wrong


def test_oracle_reproduces_the_incident():
    """v0.5.12.post1 (the incident's release): the incident's logged 11,893 tokens, 24 Mamba
    slots, 4 requests (docs/incidents.md), and scenario B2's 0 requests."""
    smoke = oracle.expect("0.5.12.post1", "dflash-smoke")
    assert (smoke.outcome, smoke.figures) == ("ok", {"max_mamba_cache_size": 24, "max_total_num_tokens": 11893,
                                                     "max_running_requests": 4})
    zero = oracle.expect("0.5.12.post1", "zero-requests-dflash")
    assert (zero.outcome, zero.figures["max_running_requests"], zero.figures["max_total_num_tokens"]) == (
        "broken", 0, 11893)


@pytest.mark.parametrize("release,mfs,outcome,figures,remedy", [
    ("0.5.13.post1", 0.6856901, "ok", {"max_mamba_cache_size": 24, "max_total_num_tokens": 3079,
                                       "max_running_requests": 4}, None),
    ("0.5.14", 0.6856901, "refused", {}, 0.587),
    ("0.5.16", 0.6856901, "refused", {}, 0.587),
    ("0.5.14", 0.725, "ok", {"max_mamba_cache_size": 24, "max_total_num_tokens": 4288, "max_running_requests": 4}, None),
    ("0.5.16", 0.725, "ok", {"max_mamba_cache_size": 24, "max_total_num_tokens": 4288, "max_running_requests": 4}, None),
])
def test_oracle_reproduces_the_h200_servers(release, mfs, outcome, figures, remedy):
    """Real SGLang servers on the H200 (tests/data/gpu_results/2026-12-02: r13, r14, r16; dflash-smoke's
    flags on the readings of h200-dflash-smoke, whose drafter's footprint was measured there):
    v0.5.13.post1 logged 3,079 KV tokens, 4 requests, 24 Mamba slots; v0.5.14 and v0.5.16 refused
    0.6856901 ("Raise --mem-fraction-static above 0.587") and at 0.725 logged 4,288 / 4 / 24."""
    cell = oracle._size(oracle.version(release), oracle.load("h200-dflash-smoke"), mfs)
    assert (cell.outcome, cell.figures, cell.remedy) == (outcome, figures, remedy)


def test_oracle_imports_neither_the_harness_nor_sglang():
    tree = ast.parse(Path(oracle.__file__).read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"sgl_overlay", "sglang", "torch"}, imported
