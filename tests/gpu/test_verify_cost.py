"""tools/gpu/verify_cost.py's pure parts: the (batch, verify tokens) grid against the KV pool,
the median of timed runs, the table."""
from tools.gpu import verify_cost as vc



def test_grid_skips_what_the_pool_cannot_hold():
    keep, skip = vc.grid([1, 32], [16, 256], 512, 20000)
    assert keep == [(1, 16), (1, 256), (32, 16)]          # 32 x 528 = 16,896 fits; 32 x 768 does not
    assert skip == [(32, 256)]


def test_summary_drops_the_warm_up():
    s = vc.summary([50.0, 2.0, 3.0, 1.0, 4.0])
    assert s == {"median_ms": 2.5, "min_ms": 1.0, "runs": 4}


def test_table():
    rows = [{"batch": 1, "tokens": 16, "median_ms": 1.6}, {"batch": 8, "tokens": 16, "median_ms": 3.2}]
    t = vc.table(rows, [1, 8], [16, 32])
    assert "| 16 | 1.600 ms (100.0 us/token) | 3.200 ms (25.0 us/token) |" in t
    assert "| 32 | - | - |" in t
