"""Where nothing was wrong the patches change nothing: dense-model scenarios
size to the same token and request counts on the pin and on the patched tree."""

import pytest

from sgl_overlay.harness import load_scenario

from tests.memory import expected as E
from tests.memory.reports import child, report


def test_healthy_h200_identical(pristine, patched):
    sc = load_scenario("healthy-h200-8b")
    a, b = report(pristine, "healthy-h200-8b")["figures"], report(patched, "healthy-h200-8b")["figures"]
    _, cell = E.kv_bytes_per_token(sc)
    assert a["max_total_num_tokens"] == E.budget_bytes(sc) // cell
    assert (a["max_total_num_tokens"], a["max_running_requests"]) == (b["max_total_num_tokens"], b["max_running_requests"])


@pytest.mark.parametrize("mfs", [0.78, 0.85, 0.95])
def test_dense_tp8_identical_where_it_starts(pristine, patched, mfs):
    a = child(pristine, "negative-rest-tp8", (("mem_fraction_static", mfs),))
    b = child(patched, "negative-rest-tp8", (("mem_fraction_static", mfs),))
    assert a["completed"] and b["completed"], (a.get("error"), b.get("error"))
    for key in ("max_total_num_tokens", "max_running_requests"):
        assert a["figures"][key] == b["figures"][key], key
