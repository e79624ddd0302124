"""Where nothing was wrong the patches change nothing: dense-model scenarios
size to the same token and request counts on the pin and on the patched tree."""

import pytest

from tests.memory.reports import child, report


def test_healthy_h200_identical(pristine, patched):
    a, b = report(pristine, "healthy-h200-8b")["figures"], report(patched, "healthy-h200-8b")["figures"]
    assert (a["max_total_num_tokens"], a["max_running_requests"]) == (918523, 3587)
    assert (b["max_total_num_tokens"], b["max_running_requests"]) == (918523, 3587)


@pytest.mark.parametrize("mfs", [0.78, 0.85, 0.95])
def test_dense_tp8_identical_where_it_starts(pristine, patched, mfs):
    a = child(pristine, "negative-rest-tp8", (("mem_fraction_static", mfs),))
    b = child(patched, "negative-rest-tp8", (("mem_fraction_static", mfs),))
    assert a["completed"] and b["completed"], (a.get("error"), b.get("error"))
    for key in ("max_total_num_tokens", "max_running_requests"):
        assert a["figures"][key] == b["figures"][key], key
