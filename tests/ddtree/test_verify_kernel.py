"""The verify input in one kernel (ddtree_triton._verify_kernel) equals the pure-torch path's
element for element, run by Triton's interpreter on a CPU (compiled on CUDA); and the cached
flat node index (retrive_index) is r * N + k however it is asked for."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent


def test_fused_verify_input_equals_the_torch_path():
    pytest.importorskip("triton")
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    p = subprocess.run([sys.executable, str(HERE / "verify_kernel_cases.py")], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["cases"] == 6
    assert out["mismatches"] == []


def test_fused_true_without_triton_says_so(dd, monkeypatch):
    monkeypatch.setattr(dd, "_TRITON", False)
    from .test_verify_arrays import make_trees
    t = make_trees(dd, 0)
    with pytest.raises(RuntimeError, match="ddtree_triton does not import"):
        dd.build_verify_inputs(t, torch.zeros(5, dtype=torch.long), torch.zeros(5, dtype=torch.long), fused=True)


def test_flat_node_index_is_reused_and_grows(dd):
    dd._FLAT_INDEX.clear()
    a = dd.flat_node_index(4, 7, "cpu")
    assert a.tolist() == [[r * 7 + k for k in range(7)] for r in range(4)]
    b = dd.flat_node_index(2, 7, "cpu")
    assert b.data_ptr() == a.data_ptr() and b.tolist() == a[:2].tolist()
    c = dd.flat_node_index(9, 7, "cpu")
    assert c.tolist() == [[r * 7 + k for k in range(7)] for r in range(9)]
    assert dd.flat_node_index(3, 5, "cpu").tolist() == [[r * 5 + k for k in range(5)] for r in range(3)]
