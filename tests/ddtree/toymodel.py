"""A tiny random fp32 transformer with real attention under an explicit mask.

Used by tests/ddtree (greedy losslessness of the speculative loop, KV/hidden
commit) and tools/gpu/ddtree_check.py (tree attention vs chain runs, verify
cost).  Rotary positions come from explicit position ids, so depth positions
of tree nodes matter; attention takes a bool mask (True = attend) over
[cached keys ; new keys], exactly the FULL_MASK row layout.
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch

KV = List[Tuple[torch.Tensor, torch.Tensor]]  # per layer (k, v): [S, H, Dh]


class ToyLM:
    def __init__(self, vocab: int, dim: int = 32, layers: int = 2, heads: int = 2,
                 seed: int = 0, device="cpu", dtype=torch.float32, logit_scale: float = 4.0):
        g = torch.Generator().manual_seed(seed)

        def p(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

        self.V, self.D, self.H = vocab, dim, heads
        self.Dh = dim // heads
        self.emb = p(vocab, dim)
        self.layers = []
        for _ in range(layers):
            self.layers.append(dict(
                wq=p(dim, dim, scale=dim ** -0.5), wk=p(dim, dim, scale=dim ** -0.5),
                wv=p(dim, dim, scale=dim ** -0.5), wo=p(dim, dim, scale=dim ** -0.5),
                w1=p(dim, 2 * dim, scale=dim ** -0.5), w2=p(2 * dim, dim, scale=(2 * dim) ** -0.5),
            ))
        self.out = p(dim, vocab, scale=logit_scale * dim ** -0.5)
        self.device, self.dtype = device, dtype

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x [..., T, H, Dh], pos [..., T]
        half = self.Dh // 2
        freq = 1.0 / (10000 ** (torch.arange(half, device=x.device, dtype=x.dtype) / half))
        ang = pos.to(x.dtype).unsqueeze(-1) * freq  # [..., T, half]
        cos, sin = ang.cos().unsqueeze(-2), ang.sin().unsqueeze(-2)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    @staticmethod
    def _norm(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: Optional[KV] = None):
        """tokens/positions [..., T]; mask [..., T, S+T] bool; cache per layer
        (k, v) [..., S, H, Dh] or None.  Returns (logits [..., T, V],
        hidden [..., T, D], new_kv per layer [..., T, H, Dh])."""
        x = self.emb[tokens]
        new_kv: KV = []
        for li, w in enumerate(self.layers):
            h = self._norm(x)
            shp = h.shape[:-1] + (self.H, self.Dh)
            q = self._rope((h @ w["wq"]).view(shp), positions)
            k = self._rope((h @ w["wk"]).view(shp), positions)
            v = (h @ w["wv"]).view(shp)
            new_kv.append((k, v))
            if cache is not None:
                k = torch.cat([cache[li][0], k], dim=-3)
                v = torch.cat([cache[li][1], v], dim=-3)
            # [..., H, T, S+T]
            att = torch.einsum("...thd,...shd->...hts", q, k) / math.sqrt(self.Dh)
            att = att.masked_fill(~mask.unsqueeze(-3), float("-inf")).softmax(-1)
            o = torch.einsum("...hts,...shd->...thd", att, v).reshape(h.shape)
            x = x + o @ w["wo"]
            x = x + torch.nn.functional.gelu(self._norm(x) @ w["w1"]) @ w["w2"]
        hid = self._norm(x)
        return hid @ self.out, hid, new_kv

    def causal(self, tokens: torch.Tensor):
        """Plain causal forward over a 1-D token sequence (positions 0..T-1)."""
        T = tokens.shape[-1]
        pos = torch.arange(T, device=tokens.device)
        mask = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
        return self.forward(tokens, pos, mask)

    def greedy(self, prompt: List[int], n: int) -> List[int]:
        seq = list(prompt)
        for _ in range(n):
            logits, _, _ = self.causal(torch.tensor(seq, device=self.device))
            seq.append(int(logits[-1].argmax()))
        return seq[len(prompt):]
