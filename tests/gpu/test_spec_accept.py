"""Offline acceptance (tools/gpu/spec_accept.py): labels of each anchor, the chain's and the tree's
accepted drafts (the tree the server's own overlay/…/ddtree_tree.py builds), a request's steps."""
import torch

from tests.by_path import ROOT, load
from tests.gpu.spec_script import accept

tree_mod = load(ROOT / "overlay/python/sglang/srt/speculative/ddtree_tree.py", "ddtree_tree_for_accept")


def test_labels_are_the_next_tokens_and_stop_at_the_end():
    lab = accept.labels([9, 9, 5, 6, 7, 8], 2, 3)      # prompt 2 tokens, answer 5 6 7 8
    assert lab.tolist() == [[6, 7, 8], [7, 8, -1], [8, -1, -1]]


def test_chain_accepts_the_matching_prefix_only():
    lab = torch.tensor([[6, 7, 8], [7, 8, -1], [8, -1, -1]])
    pred = torch.tensor([[6, 7, 1], [1, 8, 4], [8, 8, 8]])
    assert accept.chain_accepts(pred, lab).tolist() == [2, 0, 1]    # a later match after a miss counts nothing


def test_walk_jumps_by_accepted_plus_bonus():
    # answer of 8 tokens; at anchor 0 three drafts accepted -> next anchor 4, then 1 -> 6, then 0 -> 7 = end
    steps, tokens = accept.walk([3, 0, 0, 0, 1, 0, 0], 5, 8)
    assert (steps, tokens) == (3, 8)
    assert accept.walk([0] * 7, 5, 8) == (7, 8)     # nothing accepted: one token a step after the prefill's
    assert accept.walk([], 5, 1) == (0, 1)          # only the prefill's token: no verify step
    a = accept.total("DFLASH", [(3, 8), (7, 8)])
    assert a.length == round(16 / 10, 4) and a.as_dict()["requests"] == 2


def _topk(probs):
    """ids, log-probs [1, L, K] sorted, from per-depth probability lists over a small vocabulary."""
    p = torch.tensor(probs, dtype=torch.float32).log().unsqueeze(0)
    lp, ids = torch.sort(p, dim=-1, descending=True)
    return ids, lp


def test_tree_accepts_a_second_choice_the_chain_misses():
    # depth 1: token 3 (0.6) or 4 (0.4); depth 2: token 1 (0.9) else; the target says 4 then 1
    ids, lps = _topk([[0.0, 0.0, 0.0, 0.6, 0.4], [0.0, 0.9, 0.05, 0.03, 0.02]])
    lab = torch.tensor([[4, 1]])
    assert accept.chain_accepts(ids[:, :, 0], lab).tolist() == [0]
    assert accept.tree_accepts(tree_mod, ids, lps, lab, 4).tolist() == [2]    # 3, 4, 3-1, 4-1 fit 4 nodes
    # path weights: 3 (0.6), 3-1 (0.54), 4 (0.4), 4-1 (0.36)
    assert accept.tree_accepts(tree_mod, ids, lps, lab, 3).tolist() == [1]    # 4 in, 4-1 out
    assert accept.tree_accepts(tree_mod, ids, lps, lab, 2).tolist() == [0]    # 3 and 3-1 only


def test_tree_grows_with_its_budget_and_is_the_chain_when_the_drafter_is_sure():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 6, 11, generator=g) * 3
    ids, lps = tree_mod.topk_logprobs(logits, 15, method="torch")
    lab = torch.where(torch.rand(50, 6, generator=g) < 0.7, ids[:, :, 0], torch.randint(0, 11, (50, 6), generator=g))
    # a larger budget's tree holds the smaller one's (the best prefixes first): never fewer accepted
    small, big = (accept.tree_accepts(tree_mod, ids, lps, lab, b) for b in (15, 100))
    assert bool((big >= small).all()) and int(big.sum()) > int(small.sum())
    # a sure drafter (rank 0 near 1 at every depth): the best 6 prefixes are the greedy chain of 6
    sure = logits.clone()
    sure.scatter_(2, ids[:, :, :1], 100.0)
    ids2, lps2 = tree_mod.topk_logprobs(sure, 15, method="torch")
    assert accept.tree_accepts(tree_mod, ids2, lps2, lab, 6).tolist() == accept.chain_accepts(ids2[:, :, 0], lab).tolist()
