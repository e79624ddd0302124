"""tools/gpu/pre_gap_check.py's pure parts: the per-step deltas of its readings and the number of
streams PyTorch's pool creates."""
import pytest

from tools.gpu import pre_gap_check as pgc


MIB = 1 << 20


def test_deltas_split_the_drop_into_allocator_and_driver():
    readings = [{"step": "baseline", "free": 1000 * MIB, "reserved": 2 * MIB},
                {"step": "stream", "free": 930 * MIB, "reserved": 2 * MIB},      # all outside the allocator
                {"step": "matmul", "free": 890 * MIB, "reserved": 36 * MIB}]     # 34 MiB of it reserved
    assert pgc.deltas(readings) == [
        {"step": "stream", "free_drop": 70 * MIB, "reserved_delta": 0, "outside_allocator": 70 * MIB},
        {"step": "matmul", "free_drop": 40 * MIB, "reserved_delta": 34 * MIB, "outside_allocator": 6 * MIB}]


def test_pool_streams():
    assert pgc.pool_streams((0, -5)) == 128      # six levels, capped at four
    assert pgc.pool_streams((0, -1)) == 64
    assert pgc.pool_streams((0, 0)) == 32


def test_every_order_measures_each_step_once():
    for steps in pgc.ORDERS.values():
        assert sorted(steps) == ["matmul", "matmul_again", "stream", "stream_again"]


def test_without_a_gpu_it_says_so(capsys, tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert pgc.main(["--out", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
