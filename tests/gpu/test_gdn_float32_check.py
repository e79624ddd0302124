"""tools/gpu/gdn_float32_check.py's float64 reference of the gated delta rule, on
answers known in closed form (the GPU part runs on the device: docs/gpu.md)."""
import torch

from tools.gpu import gdn_float32_check as check



def test_no_writes_only_decay():
    """beta = 0: the state only decays, S_t = S_0 * exp(g_1 + ... + g_t), and o_t = S_t (scale q_t / |q_t|)."""
    g_ = torch.Generator().manual_seed(0)
    T, Hk, Hv, K, V = 5, 1, 2, 4, 3
    q, k, v = torch.randn(1, T, Hk, K, generator=g_), torch.randn(1, T, Hk, K, generator=g_), torch.randn(1, T, Hv, V, generator=g_)
    g = -torch.rand(1, T, Hv, generator=g_)
    h0 = torch.randn(1, Hv, V, K, generator=g_)
    o, hT = check.reference(q, k, v, g, torch.zeros(1, T, Hv), 0.5, h0, [0, T])
    decay = torch.exp(torch.cumsum(g.double()[0], 0))          # [T, Hv]
    qn = q.double()[0, :, 0] / q.double()[0, :, 0].norm(dim=-1, keepdim=True)
    for h in range(Hv):           # both value heads read key head 0
        want = torch.einsum("t,vk,tk->tv", decay[:, h], h0.double()[0, h], 0.5 * qn)
        torch.testing.assert_close(o[0, :, h], want)
        torch.testing.assert_close(hT[0, h], h0.double()[0, h] * decay[-1, h])


def test_full_write_recalls_the_value_and_sequences_are_independent():
    """g = 0, beta = 1: a token writes its value exactly under its (unit) key, S k = v, so a query
    equal to the key reads scale * v; a second sequence starts from its own state."""
    K = V = 4
    e = torch.eye(K)
    k = torch.stack([e[0], e[1], e[0]]).view(1, 3, 1, K) * 3.0      # normalised by the rule
    v = torch.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8], [-1, 0, 1, 0]]).view(1, 3, 1, V)
    q = k.clone()
    h0 = torch.zeros(2, 1, V, K)
    h0[1, 0] = torch.ones(V, K)
    o, hT = check.reference(q, k, v, torch.zeros(1, 3, 1), torch.ones(1, 3, 1), 2.0, h0, [0, 2, 3])
    torch.testing.assert_close(o[0, 0, 0], 2.0 * v[0, 0, 0].double())
    torch.testing.assert_close(o[0, 1, 0], 2.0 * v[0, 1, 0].double())
    torch.testing.assert_close(o[0, 2, 0], 2.0 * v[0, 2, 0].double())   # overwrote the ones under key e0
    torch.testing.assert_close(hT[0, 0] @ e[1].double(), v[0, 1, 0].double())
    torch.testing.assert_close(hT[1, 0] @ e[1].double(), torch.ones(V, dtype=torch.float64))  # untouched column


def test_inputs():
    x = check.inputs({"Hk": 2, "Hv": 4, "K": 8, "V": 8}, [1, 15, 4], seed=0, device="cpu")
    assert x["cu_seqlens"].tolist() == [0, 1, 16, 20] and x["slots"].tolist() == [1, 2, 3]
    assert x["q"].shape == (1, 20, 2, 8) and x["v"].shape == (1, 20, 4, 8) and x["pool"].shape == (5, 4, 8, 8)
    assert (x["g"] <= 0).all() and ((x["beta"] > 0) & (x["beta"] < 1)).all()
