"""Acceptance on held-out prompts, offline (issue 42): how many tokens a verify step of DFLASH (the
drafter's greedy chain) and of DDTREE-<budget> (the best-first tree of the server's own ddtree_tree)
would commit, from the drafter's block predictions at every position of the target's own greedy
answer.  A measurement of the drafter on real outputs of the target, not a simulated acceptance:
with greedy verification the committed tokens are the target's greedy answer whatever was drafted,
so the drafter's prediction at each anchor fixes that step's acceptance, and the steps of a request
follow from the anchor positions (walk).

Conventions (SpecForge's DFlash training and SGLang's DFlash worker): a request's prompt has P tokens
and its answer n; the anchor is the last committed token, the first one the prefill's (position P);
the block at anchor a drafts positions a+1 .. a+L (L = block - 1) and a step commits the accepted
drafts plus the target's bonus token, so the next anchor is a + accepted + 1.  acceptance length =
committed tokens / verify steps, summed over requests, as the servers' completion_tokens /
spec_verify_ct.

Pure torch (CPU or GPU), no model: tests/gpu/test_spec_accept.py."""
from dataclasses import dataclass

import torch


def labels(seq, prompt_len, depth):
    """[A, depth] int64: for each anchor a = prompt_len .. len(seq) - 2, the target's tokens at
    a+1 .. a+depth (-1 past the end of the answer: never accepted)."""
    n = len(seq)
    seq = torch.as_tensor(seq, dtype=torch.long)
    anchors = torch.arange(prompt_len, n - 1)
    idx = anchors.unsqueeze(1) + torch.arange(1, depth + 1).unsqueeze(0)
    return torch.where(idx < n, seq[idx.clamp(max=n - 1)], torch.full_like(idx, -1))


def chain_accepts(pred, lab):
    """[A] accepted drafts of a chain step: the length of the prefix of pred [A, L] equal to lab."""
    ok = (pred.to(lab.device) == lab) & (lab >= 0)
    return ok.long().cumprod(dim=1).sum(dim=1)


def tree_accepts(tree_mod, ids, lps, lab, budget):
    """[A] accepted drafts of a DDTREE-<budget> step: the tree built by the server's own
    ddtree_tree.build_ddtree from the per-depth top-K (ids, lps [A, L, K], K >= budget as the
    worker's topk_logprobs(..., budget)), walked by its accept_greedy with the target's token after
    each node (its depth's label: greedy verification, the target's answer)."""
    tree = tree_mod.build_ddtree(ids, lps, budget, method="torch")
    depth = tree.depths.to(lab.device)
    nxt = torch.cat([lab, torch.full_like(lab[:, :1], -1)], dim=1)      # after a node at depth d: label d+1
    pred = torch.gather(nxt, 1, depth.clamp(max=lab.shape[1]))
    return tree_mod.accept_greedy(tree, pred).accept_len.to(lab.device)


def walk(accepts, prompt_len, n):
    """(verify steps, committed tokens) of one request whose answer has n tokens: accepts[i] is the
    accepted drafts at anchor prompt_len + i; the first token is the prefill's."""
    steps, a, end = 0, 0, n - 1
    acc = [int(x) for x in accepts]
    while a < end:
        steps += 1
        a += acc[a] + 1
    return steps, n


@dataclass(frozen=True)
class Acceptance:
    """One configuration's acceptance over a prompt set: committed tokens / verify steps."""
    config: str
    requests: int
    tokens: int
    steps: int

    @property
    def length(self):
        return round(self.tokens / self.steps, 4) if self.steps else None

    def as_dict(self):
        return {"config": self.config, "requests": self.requests, "tokens": self.tokens, "steps": self.steps,
                "accept_length": self.length}


def total(config, walks):
    """Acceptance of `config` from the (steps, tokens) of each request."""
    return Acceptance(config, len(walks), sum(t for _, t in walks), sum(s for s, _ in walks))
