"""The ddtree topic's port to SGLang v0.5.23 (patches/ports/v0.5.23/ddtree;
docs/ddtree-sglang.md, "v0.5.23 port"): ``--dtype float32`` for DFlash's
drafter and the Qwen3.5 hybrid's Gated DeltaNet chunk path.

Default tree: v0.5.23 with the whole port applied strictly
(tests/port_tree.py).  ``--tree DIR``: any tree holding ``sglang/`` or
``python/sglang/``; the export runs each patch's ``Evidence:`` tests on
v0.5.23 with the series' earlier patches (they must fail) and with the patch
too (they must pass).  ``v0523`` is the pristine release, for the controls
(what the port must leave as v0.5.23 has it).

The probes are test_float32.py's (float32_probes.py): the tree's own
``ModelRunner._extend_forward_kwargs``, and every GDN / conv / attention
kernel of the hybrid's calls through Triton's front end for an H200 target
(the ``[kernels]`` extra's triton 3.6 and einops; skipped without them, which
an evidence run reports as not passing).  Expectations are stated from the
patches' intent (float32 in, float32 through, IEEE dots under
TRITON_F32_DEFAULT=ieee), not read from a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sgl_overlay import release_trees
from sgl_overlay.harness import source_root

from tests import port_tree
from tests.ddtree_integration.run import probe
from tests.ddtree_integration.test_float32 import F32_ENV, PROBES, embeds, failures, hybrid, needs_triton

SERIES_DIR = port_tree.PORTS / "ddtree"
IEEE = {"TRITON_F32_DEFAULT": "ieee"}
KKT = "chunk_gated_delta_rule_fwd_kkt_solve_kernel"
# the GDN chunk path's kernels: chunk_gated_delta_rule runs them all once past its dtype check
CHUNK_KERNELS = {KKT, "recompute_w_u_fwd_kernel", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
                 "chunk_fwd_kernel_o", "l2norm_fwd_kernel", "chunk_local_cumsum_scalar_kernel"}


@pytest.fixture(scope="module")
def port(request, tmp_path_factory) -> Path:
    given = request.config.getoption("--tree")
    if given:
        return source_root(given)
    return source_root(port_tree.build(SERIES_DIR, tmp_path_factory.mktemp("ddtree-port-v0.5.23") / "sglang"))


@pytest.fixture(scope="module")
def v0523() -> Path:
    return source_root(release_trees.release_tree(port_tree.RELEASE))


# -- float32-draft-embeddings.patch -------------------------------------------

def test_float32_drafter_gets_float32_embeddings(port):
    """v0.5.23's _extend_forward_kwargs casts input_embeds to bfloat16 for every
    model: a float32 drafter's first projection then raises "expected m1 and m2
    to have the same dtype, but got: c10::BFloat16 != float" (the H200's failure)."""
    assert embeds(port, "float32") == {"dtype": "torch.float32", "linear": "ok"}


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16"])
def test_other_dtypes_keep_v0_5_23s_cast(port, v0523, model_dtype):
    """Control: bfloat16 and float16 models get what v0.5.23 gives them (bfloat16)."""
    ours, theirs = embeds(port, model_dtype), embeds(v0523, model_dtype)
    assert ours == theirs and ours["dtype"] == "torch.bfloat16"


# -- float32-gdn-chunk.patch --------------------------------------------------

@needs_triton
def test_float32_hybrid_kernels_compile(port):
    """With the float32 environment (conv states float32, TRITON_F32_DEFAULT=ieee)
    every call of the hybrid's prefill, decode, verify and drafter returns and
    every kernel compiles for float32, the GDN chunk path's among them, every
    tl.dot IEEE.  v0.5.23 refuses in chunk_gated_delta_rule ("does not support
    float32. Please use bfloat16.")."""
    r = hybrid(port, "float32", F32_ENV)
    assert r["conv_state_dtype"] == "torch.float32"
    assert failures(r) == []
    kernels = {k["kernel"] for c in r["calls"].values() for k in c["kernels"]}
    assert CHUNK_KERNELS <= kernels, sorted(CHUNK_KERNELS - kernels)
    precisions = {p for c in r["calls"].values() for k in c["kernels"] for p in k["dots"]}
    assert precisions == {"ieee"}, precisions


def _kkt(tree, dtype, env=None):
    """The fused kkt + solve kernel as the call compiled it (each of its
    compilations: v0.5.23 compiles it more than once): the dots' precisions
    summed and the TTIR digests."""
    call = "extend.kkt_solve"
    ks = [k for k in hybrid(tree, dtype, env, [call])["calls"][call]["kernels"] if k["kernel"] == KKT]
    assert ks and all(k["ok"] for k in ks), ks
    dots = {}
    for k in ks:
        for p, n in k["dots"].items():
            dots[p] = dots.get(p, 0) + n
    return {"dots": dots, "ttir_sha256": sorted(k["ttir_sha256"] for k in ks)}


@needs_triton
def test_merge_dots_follow_triton_f32_default(port):
    """Under TRITON_F32_DEFAULT=ieee the fused kkt + solve kernel's dots are all
    IEEE (its block-merge dots name TF32 on an H200 in v0.5.23, which the
    variable does not override)."""
    k = _kkt(port, "float32", IEEE)
    assert set(k["dots"]) == {"ieee"}, k["dots"]


@needs_triton
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_kkt_kernel_unchanged_without_the_variable(port, v0523, dtype):
    """Control: without TRITON_F32_DEFAULT the kernel compiles to v0.5.23's TTIR."""
    a, b = _kkt(v0523, dtype), _kkt(port, dtype)
    assert a["ttir_sha256"] == b["ttir_sha256"] and a["dots"] == b["dots"], (a, b)


# -- the upstream-style unit test the series adds ------------------------------

UPSTREAM_TEST = Path("test/registered/unit/model_executor/test_extend_forward_kwargs.py")


def test_upstream_unit_test_passes(port):
    """test/registered/unit/model_executor/test_extend_forward_kwargs.py (added
    by float32-draft-embeddings.patch, SGLang's test layout) passes on the tree,
    run with the tree's own model_runner.py (probe upstream_unit_test: a CPU
    interpreter without SGLang's GPU dependencies cannot import it whole)."""
    root = port.parent if port.name == "python" else None
    if root is None or not (root / UPSTREAM_TEST).is_file():
        pytest.fail(f"{UPSTREAM_TEST} is not in the tree {port} (a checkout layout with test/ is needed)")
    r = probe(port, "upstream_unit_test", module=PROBES, path=str(root / UPSTREAM_TEST))
    assert r.get("ok"), r
    assert r["value"]["run"] == 2 and r["value"]["failed"] == [], r["value"]
