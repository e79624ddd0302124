"""hybrid-verify-graph-padding.patch, dropped at v0.5.17: a target verify padded
to a captured batch size keeps every real request's Mamba slot and query range
on the pin itself.

On v0.5.12.post1 MambaAttnBackendBase counted as padding every row whose
sequence length equals the graph runner's fill value (1), so a one-token prompt
at its first verify was counted too and the batch's last real request lost its
Mamba slot (-1) and its query tokens for the step.  2411737244 (#28579, v0.5.14)
has the decode graph runner hand the backend ``num_padding = bs - raw_bs``
(``build_replay_fb_view``); the pin's replay path is run here on CPU
(padding_probes.py)."""

from sgl_overlay import release_trees

from tests.ddtree_integration.run import probe

SEQ_LENS = [9, 1, 5]  # the one-token prompt is not the last request
BS, N = 4, 4


def replay(tree, **kw):
    r = probe(tree, "chain_verify_replay", module="tests.ddtree_integration.padding_probes",
              seq_lens=SEQ_LENS, bs=BS, draft_tokens=N, **kw)
    assert r["ok"], f"{r.get('type')}: {r.get('message')}"
    return r["value"]


def test_the_pin_keeps_every_real_request(pristine_tree, patched_tree):
    for tree in (pristine_tree, patched_tree):
        v = replay(tree)
        assert v["fill"] == min(SEQ_LENS), "the test needs a real request whose length is the fill value"
        assert v["num_padding"] == BS - len(SEQ_LENS)
        assert v["state_indices"] == v["expected_state_indices"], v
        assert v["query_start_loc"] == v["expected_query_start_loc"], v


def test_counting_the_fill_value_drops_the_last_request(pristine_tree):
    """The control: the pin's backend without the runner's num_padding counts the
    padding by the fill value, as v0.5.12.post1 did, and loses the last real request."""
    v = replay(pristine_tree, drop_num_padding=True)
    last = len(SEQ_LENS) - 1
    assert v["state_indices"][:last] == v["expected_state_indices"][:last]
    assert v["state_indices"][last] == -1 != v["expected_state_indices"][last], v
    assert v["query_start_loc"][last + 1] == v["query_start_loc"][last], v


def test_v0_5_12_post1_dropped_the_last_request():
    """What the dropped patch fixed, on the release it was written for
    (padding_probes.chain_verify_replay_before_28579: that release's replay
    metadata entry point)."""
    r = probe(release_trees.release_tree("0.5.12.post1"), "chain_verify_replay_before_28579",
              module="tests.ddtree_integration.padding_probes", seq_lens=SEQ_LENS, bs=BS, draft_tokens=N)
    assert r["ok"], r
    v, last = r["value"], len(SEQ_LENS) - 1
    assert v["state_indices"][last] == -1 != v["expected_state_indices"][last], v


def test_the_patch_kept_the_last_request_on_v0_5_12_post1(patched_tree_of):
    """The dropped patch's evidence on its own release (the release matrix): the stack this
    repository kept for v0.5.12.post1 (tests/conftest.py EARLIER_PINS, with
    hybrid-verify-graph-padding.patch) keeps every real request's slot and query range through
    the same entry point where the release alone loses the last one (the test above)."""
    r = probe(patched_tree_of("0.5.12.post1"), "chain_verify_replay_before_28579",
              module="tests.ddtree_integration.padding_probes", seq_lens=SEQ_LENS, bs=BS, draft_tokens=N)
    assert r["ok"], r
    v = r["value"]
    assert v["state_indices"] == v["expected_state_indices"], v
    assert v["query_start_loc"] == v["expected_query_start_loc"], v
