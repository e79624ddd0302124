"""Bad input: a clear message that says what is known, exit 2."""

import pytest

from sgl_overlay.errors import UsageError
from sgl_overlay.planner import core, deployment

from .helpers import DFLASH, LLAMA8B, PIN, QWEN36, UNKNOWN_ARCH, cli


def test_architecture_unknown_to_the_release():
    code, out, err = cli(UNKNOWN_ARCH, "--gpu", "H200", "--release", PIN, "--", "--mem-fraction-static", "0.9")
    assert code == 2
    assert f"architecture 'FrobnicatorForCausalLM' is not one SGLang {PIN} knows" in err
    assert "architectures registered in" in err and "closest:" in err


def test_architecture_the_release_does_not_have_yet():
    """Qwen3.6 (qwen3_5) arrived after v0.5.8: that release's registry lacks the class."""
    code, out, err = cli(QWEN36, "--draft", DFLASH, "--gpu", "RTX PRO 6000 Blackwell", "--release", "0.5.8",
                         "--", "--mem-fraction-static", "0.8")
    assert code == 2
    assert "'Qwen3_5ForConditionalGeneration' is not one SGLang 0.5.8 knows" in err


def test_flag_the_release_does_not_have():
    code, out, err = cli(LLAMA8B, "--gpu", "H200", "--release", "0.5.9", "--",
                         "--mem-fraction-static", "0.9", "--speculative-dflash-block-size", "16")
    assert code == 2
    assert "SGLang 0.5.9 rejects the server flags: unrecognized arguments: --speculative-dflash-block-size" in err
    assert "declares 341 flags" in err


def test_flag_value_the_release_does_not_accept():
    code, out, err = cli(LLAMA8B, "--gpu", "H200", "--release", "0.5.9", "--",
                         "--mem-fraction-static", "0.9", "--speculative-algorithm", "DFLASH")
    assert code == 2
    assert "invalid choice: 'DFLASH'" in err and "EAGLE" in err


def test_gpu_not_in_the_table():
    code, out, err = cli(LLAMA8B, "--gpu", "H300", "--release", PIN, "--", "--mem-fraction-static", "0.9")
    assert code == 2
    assert "GPU 'H300' is not in the planner's table" in err
    for name in ("RTX 5090", "RTX PRO 6000 Blackwell", "L40S", "A100 80GB", "H100 80GB", "H200", "B200"):
        assert name in err


def test_missing_default_tree_says_how_to_build_it(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "overlay").mkdir()
    (tmp_path / "patches" / "series").write_text("")
    (tmp_path / "upstream.lock").write_text("")
    with pytest.raises(UsageError) as e:
        core.resolve_tree(None, None, tmp_path)
    assert "no patched SGLang tree" in e.value.message and "python tools/apply.py" in e.value.hint


def test_no_mem_fraction_static_is_not_bad_input():
    """Without --mem-fraction-static the planner takes SGLang's own value (tests/plan/test_default_fraction.py
    checks it against real start-ups): the deployment is made, the flag left to the release."""
    dep = deployment(model=LLAMA8B, gpu="H200", argv=[], release=PIN)
    assert "mem_fraction_static" not in dep.fields


def test_bad_free_memory_figures():
    code, out, err = cli(LLAMA8B, "--free-gib", "lots", "--release", PIN, "--", "--mem-fraction-static", "0.9")
    assert code == 2 and "--free-gib 'lots'" in err


def test_json_error_for_machines():
    import json

    code, out, err = cli(LLAMA8B, "--gpu", "H300", "--release", PIN, "--json", "--", "--mem-fraction-static", "0.9")
    assert code == 2
    data = json.loads(out)
    assert data["status"] == "error" and data["exit_code"] == 2 and "H300" in data["error"]
    assert "known GPUs" in data["hint"]


def test_default_tree_older_than_the_series_is_flagged(tmp_path):
    """A tree tools/apply.py built from another stack than patches/series now holds."""
    import json

    from sgl_overlay import builder, series
    from sgl_overlay.planner.core import _label, _staleness
    from tests.plan.helpers import ROOT

    (tmp_path / builder.MANIFEST).write_text(json.dumps(
        {"tool": "sgl-overlay", "stack_digest": "0" * 64, "lock": {"version": PIN}, "patches": ["a.patch"]}))
    assert _label(tmp_path, tmp_path).startswith(f"{PIN} + 1 patches (patched tree")
    warning = _staleness(tmp_path, ROOT)
    assert warning and "python tools/apply.py" in warning
    current = series.load(ROOT).digest
    (tmp_path / builder.MANIFEST).write_text(json.dumps({"tool": "sgl-overlay", "stack_digest": current}))
    assert _staleness(tmp_path, ROOT) is None
