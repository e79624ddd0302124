"""The flags are SGLang's own, parsed by each release's ServerArgs."""

import pytest

from sgl_overlay.errors import UsageError
from sgl_overlay.planner import core, gpus

# a release with the old field name and human_readable_int (a release-matrix test: each
# release's own ServerArgs)
OLD_FIELD_RELEASE = "0.5.12.post1"


def _tree(release):
    return core.resolve_tree(None, release, None)


def test_field_names_and_types_come_from_the_release():
    argv = ["--mamba-scheduler-strategy", "extra_buffer", "--context-length", "32k", "--tp-size", "2"]
    fields, dropped = core.parse_flags(_tree(OLD_FIELD_RELEASE), argv)
    # v0.5.12.post1: the field is mamba_scheduler_strategy; --context-length takes
    # the tree's own human_readable_int ("32k" = 32,000)
    assert fields == {"mamba_scheduler_strategy": "extra_buffer", "context_length": 32000, "tp_size": 2}
    assert any("human_readable_int" in d for d in dropped)
    # v0.5.16 renamed the field (the flag is a deprecated alias) and takes a plain int
    with pytest.raises(UsageError, match="invalid int value: '32k'"):
        core.parse_flags(_tree("0.5.16"), argv)
    fields16, _ = core.parse_flags(_tree("0.5.16"), ["--mamba-scheduler-strategy", "extra_buffer"])
    assert fields16 == {"mamba_radix_cache_strategy": "extra_buffer"}


def test_gpu_table():
    assert gpus.names() == ["RTX 5090", "RTX PRO 6000 Blackwell", "L40S", "A100 80GB", "H100 80GB", "H200", "B200"]
    assert gpus.lookup("NVIDIA H100 80GB HBM3").name == "H100 80GB"
    assert gpus.lookup("rtx pro 6000").total_mib == 97887
    assert all(g.source for g in gpus.GPUS)
