"""The drafter's weights in the plan (planner/model.load_draft, harness/draft_reading.py):
read from the drafter's checkpoint where it is there, and, from v0.5.14
(sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855), out of the KV budget instead of the reserve."""

import shutil

import pytest
import torch
from safetensors.torch import save_file

from sgl_overlay.harness import Outcome
from sgl_overlay.planner import core, deployment, plan
from sgl_overlay.planner.model import load_draft

from .helpers import DFLASH, LOGGED_FREE, LOGGED_TOKENS, INCIDENT, QWEN36, SMOKE_FLAGS

MIB = 1 << 20
CELL = 86016  # the smoke flags' bytes per KV token (bf16 target + 5 drafter layers; test_incident.py)


@pytest.fixture
def drafter(tmp_path):
    """The incident's drafter config with an 8 MiB checkpoint written by safetensors itself."""
    d = tmp_path / "drafter"
    shutil.copytree(DFLASH, d)
    save_file({"w": torch.zeros(2, MIB, dtype=torch.float32)}, str(d / "model.safetensors"))
    return d


def test_the_drafters_weights_are_read_from_its_checkpoint(drafter):
    assert "weights_gib" not in load_draft(DFLASH)          # a config alone: no weights known
    d = load_draft(drafter)
    assert d["weights_gib"] * (1 << 30) == 8 * MIB and "model.safetensors" in d["weights_source"]


def test_from_v0514_the_drafters_weights_come_out_of_the_kv_budget(drafter):
    def tokens(release, draft):
        s = core.size(deployment(model=QWEN36, draft=draft, argv=SMOKE_FLAGS, release=release, free_gib=LOGGED_FREE))
        assert s.outcome is Outcome.OK, s.reason
        return s.ledger["kv_tokens"], s.drafter_reading

    # v0.5.12.post1 sizes before the drafter starts: its weights do not move the KV figure
    assert tokens(INCIDENT, DFLASH)[0] == tokens(INCIDENT, drafter)[0] == LOGGED_TOKENS
    without, note = tokens("0.5.16", DFLASH)
    with_w, dr = tokens("0.5.16", drafter)
    assert "overstate the budget" in note["note"] and dr["lowered_by_gib"] * (1 << 30) == 8 * MIB
    assert without - with_w in (8 * MIB // CELL, 8 * MIB // CELL + 1)   # 97.5 tokens' worth
    report = plan(deployment(model=QWEN36, draft=drafter, argv=SMOKE_FLAGS, release="0.5.16",
                             free_gib=LOGGED_FREE), with_suggestions=False, with_sensitivity=False)
    assert any("#23862" in a for a in report["assumptions"])
    before = plan(deployment(model=QWEN36, draft=drafter, argv=SMOKE_FLAGS, release=INCIDENT, free_gib=LOGGED_FREE),
               with_suggestions=False, with_sensitivity=False)
    assert any("reserve, not out of the KV budget" in a for a in before["assumptions"])
