"""SGLang's own --mem-fraction-static: without the flag the planner uses the value the release's
ServerArgs chooses for the card (docs/plan.md), checked against what real start-ups logged."""

import re
from pathlib import Path

from sgl_overlay.planner import core, deployment

from .helpers import DFLASH, QWEN36

GPU_LOGS = Path(__file__).resolve().parents[1] / "gpu" / "data" / "h200-2026-12-01"
# tools/gpu/e2e.py's h200-16 case as it ran there (e2e_cases.BIG + the case's flags + e2e_server.COMMON's
# sizing flags), without --mem-fraction-static: SGLang chose it
H200_16 = ("--mm-attention-backend triton_attn --context-length 32768 --tp 1 --page-size 1 --speculative-algorithm "
           "DFLASH --speculative-dflash-block-size 16 --disable-radix-cache --mamba-scheduler-strategy no_buffer "
           "--max-running-requests 16 --skip-tokenizer-init --attention-backend triton --disable-cuda-graph "
           "--disable-piecewise-cuda-graph").split()


def _logged_fraction(log: Path) -> float:
    (value,) = set(re.findall(r"server_args=ServerArgs\(.*?\bmem_fraction_static=([0-9.]+)", log.read_text()))
    return float(value)


def test_the_fraction_the_h200_start_up_logged():
    """The H200 of 2026-12-01 (v0.5.12.post1, pristine): the start-up logged 0.8119442187499999, the card's
    rule (0.878) scaled for the Qwen3.5-family vision tower (ServerArgs.adjust_mem_fraction_for_vlm, with the
    tree's own Qwen3_5VisionConfig defaults: the checkpoint's config.json gives no vision_config)."""
    logged = _logged_fraction(GPU_LOGS / "h200-16.pristine.log")
    dep = deployment(model=QWEN36, draft=DFLASH, gpu="H200", argv=H200_16, release="0.5.12.post1")
    report, _ = core.verdict_report(dep)
    assert report["mem_fraction_static"] == {"value": logged, "source": "release",
                                             "rule": "ServerArgs.adjust_mem_fraction_for_vlm"}
    assert report["ledger"]["mem_fraction_static"] == logged
    assert any(a.startswith(f"--mem-fraction-static not given: {logged}, the value SGLang 0.5.12.post1 chooses for "
                            "H200's 143,771 MiB") for a in report["assumptions"]), report["assumptions"]
    # the value given explicitly sizes the same
    given = core.size(deployment(model=QWEN36, draft=DFLASH, gpu="H200", release="0.5.12.post1",
                                 argv=H200_16 + ["--mem-fraction-static", repr(logged)]))
    assert given.ledger["kv_tokens"] == report["ledger"]["kv_tokens"]


def test_the_card_decides_it(patched_tree):
    """The same flags on the pin: the H100 80GB's value is issue 40's H100 start-up's 0.7777 (to its four
    digits), below the H200's (less memory, the same reserve)."""
    values = {}
    for gpu in ("H100 80GB", "H200"):
        report, _ = core.verdict_report(deployment(model=QWEN36, draft=DFLASH, gpu=gpu, argv=H200_16,
                                                      tree=str(patched_tree)))
        values[gpu] = report["mem_fraction_static"]["value"]
    assert round(values["H100 80GB"], 4) == 0.7777 and values["H100 80GB"] < values["H200"] < 0.95
