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
    # the worker's start-up check (ddtree_tree.fused_verify_check) passes where the kernel runs
    assert out["start_up_check"] == {"63x15": None, "6x4": None, "1x1": None}


class FakeKernels:
    """A stand-in for ddtree_triton: the torch path's outputs, one mask element flipped, or a raise."""

    def __init__(self, dd, mode):
        self.dd, self.mode = dd, mode

    def fused_verify_inputs(self, tokens, depths, valid, ancestor, roots, prefix_lens, prefix_lens_sum):
        if self.mode == "raise":
            raise RuntimeError("0 active drivers ([]). There should only be one.")
        tree = self.dd.DDTree(tokens=tokens, depths=depths, parents=tokens, ranks=None, scores=None, valid=valid,
                              num_nodes=None, max_depth=0, ancestor=ancestor, next_token=tokens, next_sibling=tokens)
        vi = self.dd.build_verify_inputs(tree, roots, prefix_lens, prefix_lens_sum=prefix_lens_sum, fused=False)
        mask = vi.custom_mask.clone()
        mask[-1] = ~mask[-1]
        return vi.draft_token, vi.positions, mask


@pytest.mark.parametrize("mode, why", [("wrong", "differs from the torch path: custom_mask"),
                                       ("raise", "raised RuntimeError: 0 active drivers")])
def test_the_start_up_check_keeps_the_torch_path_for_a_kernel_that_fails(dd, monkeypatch, mode, why):
    monkeypatch.setattr(dd, "_TRITON", FakeKernels(dd, mode))
    assert dd.fused_verify_check("cpu", 63, 15).startswith(why)


def test_the_start_up_check_without_triton(dd, monkeypatch):
    monkeypatch.setattr(dd, "_TRITON", False)
    assert dd.fused_verify_check("cpu", 63, 15) == "triton does not import"


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


BENCH = HERE.parents[1] / "tools" / "bench" / "ddtree_verify_input.py"


@pytest.mark.parametrize("args, says", [(["--shapes", "3y"], "is not BATCHxBUDGET"),
                                        (["--shapes", "0x63"], "must be >= 1"),
                                        (["--reps", "0"], "must be >= 1")])
def test_the_benchmark_refuses_bad_arguments(args, says):
    p = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and says in p.stderr, p.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the benchmark would run")
def test_the_benchmark_without_cuda_says_where_to_run_it():
    p = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert "no CUDA device here" in p.stderr and "NVIDIA GPU" in p.stderr
