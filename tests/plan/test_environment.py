"""The planner under the caller's SGLang settings (SGLANG_*): honoured by the sizing, as the
server started from the same shell would, and named in the plan (JSON and text)."""

import json

from sgl_overlay.planner import core, deployment, plan
from sgl_overlay.planner.render import text

from ..regress import oracle
from .helpers import LOGGED_FREE, PIN, QWEN36

# Qwen3.6-27B without a drafter, its Mamba slots fixed by --max-running-requests
# (--disable-radix-cache: handle_max_mamba_cache in the pin's model_runner_kv_cache_mixin.py)
FLAGS = "--disable-radix-cache --max-running-requests 8 --context-length 32768 --mem-fraction-static 0.8".split()


def test_plan_honours_and_names_the_callers_sglang_settings(monkeypatch):
    model = {"model": {"text_config": json.loads((QWEN36 / "config.json").read_text())["text_config"]},
             "server": {}}
    extra = oracle.mamba_bytes_per_request(model, conv_bytes=4) - oracle.mamba_bytes_per_request(model)
    cell = oracle.hybrid_cell_bytes(model)
    dep = deployment(model=QWEN36, argv=FLAGS, release=PIN, free_gib=LOGGED_FREE)
    base = core.size(dep)
    assert base.environment == {} and base.ledger["mamba_slots"] == 8, base.why

    monkeypatch.setenv("SGLANG_MAMBA_CONV_DTYPE", "float32")   # the conv states in float32 (configs/mamba_utils.py)
    report = plan(dep, with_suggestions=False, with_sensitivity=False)
    led = report["ledger"]
    assert report["environment"] == {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
    assert led["mamba_slots"] == 8
    assert led["mamba_state_per_slot_bytes"] - base.ledger["mamba_state_per_slot_bytes"] == extra
    # the pools' slots: the 8 requests' and, from v0.5.17, the state pool's padding slot (#32184; oracle.py)
    pools = 8 + (1 if oracle.version(PIN) >= oracle.PADDED_SINCE else 0)
    assert pools * extra % cell == 0  # v0.5.17: 9 x 2,949,120 B = 405 cells of 65,536 B, no rounding
    assert base.ledger["kv_tokens"] - led["kv_tokens"] == pools * extra // cell
    assert "\nenvironment: SGLANG_MAMBA_CONV_DTYPE=float32 (read by SGLang" in text(report)
