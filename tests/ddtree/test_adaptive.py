"""DDTREE's adaptive verify (overlay ddtree_adaptive.py): the per-bucket choice between the tree
and DFlash's chain from measured rates, the runs that keep a measured period of one kind, and the
accept lengths read back without a wait. A simulated server gives each kind a period and an
acceptance per batch bucket; what the controller must pick follows from those figures."""

import os

import pytest
import torch

from tests.by_path import load

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "overlay", "python", "sglang", "srt", "speculative", "ddtree_adaptive.py")


@pytest.fixture(scope="module")
def ad():
    return load(_PATH, "ddtree_adaptive_overlay")


def test_batch_bucket(ad):
    assert [ad.batch_bucket(b) for b in (1, 2, 3, 4, 5, 16, 17, 32, 33)] == [1, 2, 4, 4, 8, 16, 32, 32, 64]
    with pytest.raises(ValueError, match="batch size must be >= 1"):
        ad.batch_bucket(0)


def test_bad_settings_are_refused(ad):
    with pytest.raises(ValueError, match="run_steps must be >= 2"):
        ad.AdaptiveVerify(run_steps=1)
    with pytest.raises(ValueError, match="min_samples <= window"):
        ad.AdaptiveVerify(min_samples=10, window=5)
    with pytest.raises(ValueError, match="seconds > 0"):
        ad.AdaptiveVerify().record(ad.StepSample(ad.StepVerify.TREE, 1, 0.0, 3))


class Server:
    """A simulated server with the overlap scheduler: the host's period between two decode calls is
    the GPU work of the step launched before (so the first step of a run is timed with the other
    kind's work). ``cost[kind](bs)`` seconds a step, ``accept[kind]`` tokens a request a step."""

    def __init__(self, ad, cost, accept):
        self.ad, self.cost, self.accept = ad, cost, accept
        self.t, self.prev = 0.0, None

    def clock(self):
        return self.t

    def run(self, steps, batches, choice=None, prefill_every=None):
        choice = choice or self.ad.AdaptiveVerify()
        s = self.ad.AdaptiveSteps(choice=choice, readback=self.ad.AcceptReadback(64, "cpu"), clock=self.clock)
        kinds, tokens, seconds = [], 0, 0.0
        for i in range(steps):
            bs = batches[i % len(batches)]
            if prefill_every and i % prefill_every == prefill_every - 1:
                s.interrupted()
                self.t += 1.0  # a prefill: a long period no decode step may be charged with
                self.prev = None
            kind = s.begin(bs)
            s.committed(torch.full((bs,), self.accept[kind], dtype=torch.int32))
            period = self.cost[self.prev or kind](bs)
            self.t += period
            self.prev = kind
            kinds.append(kind)
            tokens += bs * self.accept[kind]
            seconds += period
        return s, kinds, tokens / seconds


def test_each_sample_is_timed_with_its_own_kind(ad):
    """A run's first step is not measured (its period is the other kind's GPU work), nor the step
    before a prefill: every recorded sample has exactly its kind's cost and acceptance."""
    T, C = ad.StepVerify.TREE, ad.StepVerify.CHAIN
    cost = {T: lambda bs: 0.004, C: lambda bs: 0.003}
    srv = Server(ad, cost, {T: 3, C: 2})
    s, kinds, _ = srv.run(400, [1], choice=ad.AdaptiveVerify(run_steps=3, min_samples=4, explore_every=12),
                          prefill_every=17)
    assert {k for k in kinds} == {T, C}, "both kinds must be taken"
    assert len(s.measured) > 100
    for x in s.measured:
        assert (x.seconds, x.tokens) == (pytest.approx(cost[x.kind](1)), srv.accept[x.kind]), x
    # measured: a step after a decode step of its kind, with no prefill before or after it, and
    # not the last (its period ends at the next call)
    prefill_before = {i for i in range(400) if i % 17 == 16}
    expect = sum(1 for i in range(1, 399) if kinds[i - 1] is kinds[i]
                 and i not in prefill_before and i + 1 not in prefill_before)
    assert len(s.measured) == expect


@pytest.mark.parametrize("bs, best", [(1, "tree"), (32, "chain")])
def test_the_better_kind_wins_each_bucket(ad, bs, best):
    """The tree commits 3 tokens a request a step against the chain's 2; its step costs 1.3x the
    chain's at batch 1 (the tree pays: 3 / 1.3 > 2) and 1.8x at batch 32 (it does not: 3 / 1.8 < 2).
    After measuring both, the bucket runs the better one, trying the other in one run of 4 steps
    every 96: at least 90 % of the steps at the better kind, at least 95 % of its rate."""
    T, C = ad.StepVerify.TREE, ad.StepVerify.CHAIN
    cost = {C: lambda b: 0.002, T: lambda b: 0.002 * (1.3 if b == 1 else 1.8)}
    srv = Server(ad, cost, {T: 3, C: 2})
    s, kinds, rate = srv.run(2000, [bs])
    want, other = (T, C) if best == "tree" else (C, T)
    share = sum(k is want for k in kinds[200:]) / len(kinds[200:])
    assert share >= 0.9, share
    best_rate = bs * srv.accept[want] / cost[want](bs)
    assert rate >= 0.95 * best_rate, (rate, best_rate)
    st = s.choice.state(bs)
    assert st.rates[want] == pytest.approx(best_rate)
    assert st.rates[other] == pytest.approx(bs * srv.accept[other] / cost[other](bs))
    assert st.best is want
    assert f"batch <= {ad.batch_bucket(bs)}:" in s.choice.describe()


def test_the_log_names_the_better_kind_apart_from_a_trial_run(ad):
    """The server's log line says which kind a bucket takes, and a run of the other kind (measuring
    it, or refreshing its figure every explore_every steps) is marked as a trial, not as the choice:
    the H200's log of 2026-12-05 printed 'tree 9166 tok/s (48), chain 8157 tok/s (21); chain'
    for a bucket whose choice was the tree."""
    T, C = ad.StepVerify.TREE, ad.StepVerify.CHAIN
    v = ad.AdaptiveVerify(run_steps=2, min_samples=2, explore_every=4, window=8)
    assert v.describe() == "nothing measured"
    assert v.choose(1) is T and v.state(1).best is None
    assert v.describe() == "batch <= 1: tree - (0), chain - (0); measuring tree"
    for _ in range(2):  # the tree measured at 3 tokens a 1 ms: 3000 tok/s
        v.record(ad.StepSample(T, 1, 0.001, 3))
    v.choose(1)  # ends the tree's run
    assert v.choose(1) is C
    assert v.describe().endswith("; measuring chain")
    for _ in range(2):  # the chain at 2 tokens a 1 ms: 2000 tok/s
        v.record(ad.StepSample(C, 1, 0.001, 2))
    v.choose(1)
    assert v.choose(1) is T and v.state(1).best is T
    assert v.describe() == "batch <= 1: tree 3000 tok/s (2), chain 2000 tok/s (2); tree"
    kinds = [v.choose(1) for _ in range(8)]
    assert C in kinds, kinds  # the refresh run of the chain comes within explore_every steps
    for _ in range(2 * (v.explore_every + v.run_steps)):  # to the next refresh run, at most two periods away
        if v.state(1).current is C:
            break
        v.choose(1)
    assert v.state(1).current is C and v.state(1).best is T
    assert v.describe().endswith("; tree (trying chain)")


def test_buckets_are_chosen_apart(ad):
    """Batches alternating between 1 and 32 requests: each bucket keeps its own figures and choice."""
    T, C = ad.StepVerify.TREE, ad.StepVerify.CHAIN
    cost = {C: lambda b: 0.002, T: lambda b: 0.002 * (1.2 if b == 1 else 2.0)}
    srv = Server(ad, cost, {T: 3, C: 2})
    # runs are per bucket; alternating batch sizes break every run, so use long stretches of each
    s, kinds, _ = srv.run(3000, [1] * 300 + [32] * 300)
    late = kinds[1800:]
    at1 = [k for i, k in enumerate(late) if (1800 + i) % 600 < 300]
    at32 = [k for i, k in enumerate(late) if (1800 + i) % 600 >= 300]
    assert sum(k is T for k in at1) / len(at1) >= 0.9
    assert sum(k is C for k in at32) / len(at32) >= 0.9


def test_nothing_measured_stays_on_the_tree(ad):
    """A server whose every decode step is followed by a prefill never measures a step: it runs the
    tree, what DDTREE runs without the adaptive choice."""
    T, C = ad.StepVerify.TREE, ad.StepVerify.CHAIN
    srv = Server(ad, {T: lambda b: 0.004, C: lambda b: 0.001}, {T: 2, C: 1})
    s, kinds, _ = srv.run(200, [4], prefill_every=1)
    assert s.measured == [] and set(kinds) == {T}
    assert s.choice.describe().endswith("; measuring tree") and "tree - (0)" in s.choice.describe()


class _LateEvent:
    """A CUDA event that completes after ``after`` queries."""

    def __init__(self, after):
        self.left = after

    def record(self):
        pass

    def query(self):
        self.left -= 1
        return self.left < 0


def test_readback_hands_back_completed_copies_in_order(ad):
    """On CUDA a step's accept lengths come back only once its copy's event has completed, oldest
    first; with every slot waiting a step is not measured (push is refused), never waited for."""
    events = iter([_LateEvent(1), _LateEvent(0), _LateEvent(0)])
    rb = ad.AcceptReadback(8, "cuda", slots=2, host_buffer=lambda n: torch.zeros(n, dtype=torch.int64),
                           event=lambda: next(events))
    assert rb.push(torch.tensor([2, 3]), "a") and rb.push(torch.tensor([1]), "b")
    assert not rb.push(torch.tensor([4]), "c"), "no free slot: the step goes unmeasured"
    assert rb.ready() == [], "the oldest copy is not done: nothing after it is handed back"
    assert rb.ready() == [("a", 5), ("b", 1)]
    assert rb.push(torch.tensor([4, 4, 4]), "c") and rb.ready() == [("c", 12)]
    assert not rb.push(torch.zeros(9, dtype=torch.int64), "d"), "a batch above the buffers is not measured"
