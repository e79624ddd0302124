"""DDTREE's adaptive verify (sgl-overlay): per batch size, the tree or DFlash's chain, whichever
commits more tokens a second on this server, measured from its own decode steps.

With ``--speculative-ddtree-adaptive`` the DDTREE worker keeps both verify paths (the tree's and
DFlash's chain, as ``--speculative-ddtree-chain-batch`` does) and asks ``AdaptiveVerify`` before
each decode step which one to take. What decides is the measured rate of each kind, per batch
bucket (the next power of two of the batch size): the tokens its steps committed (their accept
lengths, bonus included) over the wall time they took (a step's period: from its call to the next
decode call, which with the overlap scheduler is what the pipeline runs at). Nothing is assumed
about the model, the GPU or the drafter: a tree whose extra acceptance pays for its wider verify
keeps the batch sizes where it pays, the chain takes the others.

Steps are taken in runs of one kind (``run_steps``), so that a measured period is of one kind: the
first step of a run is not measured (its period holds the previous kind's work still on the GPU),
nor a step whose period spans a prefill. Each kind is measured first (``min_samples`` steps), then
the better one is taken, and every ``explore_every`` steps of a bucket one run of the other kind
refreshes its figure (what this costs at most: that run's share of the steps at the worse kind's
rate). Each kind's rate is over its last ``window`` measured steps.

Nothing here reads the device: the accept lengths reach the host through ``AcceptReadback``
(a copy into pinned host memory behind a CUDA event, taken once the event has completed), so a
step never waits for the GPU. This module imports torch only; the tests load it by path.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional, Tuple

import torch


class StepVerify(enum.Enum):
    """What one DDTREE decode step verifies."""

    TREE = "tree"  # the best-first tree of budget nodes (budget + 1 tokens a request)
    CHAIN = "chain"  # DFlash's greedy chain (block size tokens a request)


def batch_bucket(batch_size: int) -> int:
    """The bucket a batch size is measured in: the next power of two (1, 2, 4, 8, ...)."""
    bs = int(batch_size)
    if bs < 1:
        raise ValueError(f"batch size must be >= 1, got {bs}")
    return 1 << (bs - 1).bit_length()


@dataclass(frozen=True)
class StepSample:
    """One measured decode step: its kind, batch size, period (seconds) and committed tokens."""

    kind: StepVerify
    batch_size: int
    seconds: float
    tokens: int


@dataclass
class _Bucket:
    samples: Dict[StepVerify, Deque[StepSample]]
    current: StepVerify = StepVerify.TREE
    left: int = 0  # steps left in the current run
    since_explore: int = 0  # steps taken at the better kind since the other was last tried


def better_kind(rates: Dict[StepVerify, Optional[float]]) -> Optional[StepVerify]:
    """The kind with the higher rate (the tree on a tie); None while either is unmeasured."""
    tree, chain = rates[StepVerify.TREE], rates[StepVerify.CHAIN]
    if tree is None or chain is None:
        return None
    return StepVerify.TREE if tree >= chain else StepVerify.CHAIN


@dataclass(frozen=True)
class BucketState:
    """What a bucket's choice rests on (the log line, the tests): each kind's rate (tokens/s, None
    until measured) and measured steps, the better kind (None until both are measured) and the kind
    taken now (the better one, or the other in a run that measures or refreshes it)."""

    bucket: int
    rates: Dict[StepVerify, Optional[float]]
    samples: Dict[StepVerify, int]
    best: Optional[StepVerify]
    current: StepVerify

    def label(self) -> str:
        """The log's word for it: 'tree', 'tree (trying chain)', or 'measuring chain'."""
        if self.best is None:
            return f"measuring {self.current.value}"
        if self.current is self.best:
            return self.best.value
        return f"{self.best.value} (trying {self.current.value})"


class AdaptiveVerify:
    """Which verify each decode step takes, per batch bucket, from the steps' measured rates."""

    def __init__(self, run_steps: int = 4, min_samples: int = 6, explore_every: int = 96, window: int = 48):
        if run_steps < 2:
            raise ValueError(f"run_steps must be >= 2 (a run's first step is not measured), got {run_steps}")
        if min_samples < 1 or window < min_samples:
            raise ValueError(f"need 1 <= min_samples <= window, got {min_samples} and {window}")
        self.run_steps = int(run_steps)
        self.min_samples = int(min_samples)
        self.explore_every = int(explore_every)
        self.window = int(window)
        self._buckets: Dict[int, _Bucket] = {}

    def _bucket(self, bucket: int) -> _Bucket:
        b = self._buckets.get(bucket)
        if b is None:
            b = _Bucket(samples={k: deque(maxlen=self.window) for k in StepVerify})
            self._buckets[bucket] = b
        return b

    def rate(self, bucket: int, kind: StepVerify) -> Optional[float]:
        """Tokens a second of ``kind``'s measured steps in ``bucket`` (None before ``min_samples``)."""
        s = self._bucket(bucket).samples[kind]
        seconds = sum(x.seconds for x in s)
        if len(s) < self.min_samples or seconds <= 0:
            return None
        return sum(x.tokens for x in s) / seconds

    def rates(self, bucket: int) -> Dict[StepVerify, Optional[float]]:
        return {k: self.rate(bucket, k) for k in StepVerify}

    def state(self, batch_size: int) -> BucketState:
        bucket = batch_bucket(batch_size)
        b = self._bucket(bucket)
        rates = self.rates(bucket)
        return BucketState(bucket=bucket, rates=rates, samples={k: len(b.samples[k]) for k in StepVerify},
                           best=better_kind(rates), current=b.current)

    def describe(self) -> str:
        """Each bucket's rates and the kind taken, for the server's log."""
        parts = []
        for bucket in sorted(self._buckets):
            st = self.state(bucket)
            rates = ", ".join(f"{k.value} {'-' if r is None else f'{r:.0f} tok/s'} ({st.samples[k]})"
                              for k, r in st.rates.items())
            parts.append(f"batch <= {bucket}: {rates}; {st.label()}")
        return "; ".join(parts) or "nothing measured"

    def choose(self, batch_size: int) -> StepVerify:
        """The kind the next decode step of ``batch_size`` requests takes."""
        bucket = batch_bucket(batch_size)
        b = self._bucket(bucket)
        if b.left > 0:
            b.left -= 1
            return b.current
        rates = self.rates(bucket)
        best = better_kind(rates)
        if best is None:
            # the tree first: it is what DDTREE runs without this
            nxt = next(k for k in StepVerify if rates[k] is None)
        else:
            if b.since_explore >= self.explore_every:
                nxt = StepVerify.CHAIN if best is StepVerify.TREE else StepVerify.TREE
                b.since_explore = 0
            else:
                nxt = best
                b.since_explore += self.run_steps
        b.current, b.left = nxt, self.run_steps - 1
        return nxt

    def record(self, sample: StepSample) -> None:
        """A measured step (its kind's own period and tokens)."""
        if sample.seconds <= 0 or sample.tokens < 0:
            raise ValueError(f"a measured step needs seconds > 0 and tokens >= 0, got {sample}")
        self._bucket(batch_bucket(sample.batch_size)).samples[sample.kind].append(sample)


@dataclass
class _Step:
    kind: StepVerify
    batch_size: int
    started: float
    measured: bool  # the step follows a decode step of its kind and bucket (its period is its own)
    seconds: Optional[float] = None
    tokens: Optional[int] = None
    settled: bool = False  # its period is known (or known to be unusable)
    recorded: bool = False


class AcceptReadback:
    """Each step's accept lengths on the host without a wait: copied (non-blocking) into one of
    ``slots`` host buffers behind an event; ``ready`` hands back the steps whose copy completed.
    ``host_buffer(n)`` makes a buffer of n int64 (pinned memory on CUDA), ``event()`` an event
    recorded after the copy (a CUDA event on CUDA); on a CPU device the copy is done at once. A
    step is not measured when every slot still waits for its copy."""

    def __init__(self, max_bs: int, device, slots: int = 8,
                 host_buffer: Optional[Callable[[int], torch.Tensor]] = None, event: Optional[Callable] = None):
        self.cuda = torch.device(device).type == "cuda"
        if host_buffer is None:
            def host_buffer(n):
                return torch.empty((n,), dtype=torch.int64, pin_memory=self.cuda)
        self.event = event if event is not None else (lambda: torch.cuda.Event())
        self.buffers = [host_buffer(int(max_bs)) for _ in range(int(slots))]
        self.free: List[int] = list(range(int(slots)))
        self.waiting: Deque[Tuple[int, int, object, object]] = deque()  # (slot, n, event, tag)

    def push(self, accept_lens: torch.Tensor, tag) -> bool:
        n = int(accept_lens.shape[0])
        if not self.free or n > int(self.buffers[0].shape[0]):
            return False
        slot = self.free.pop()
        self.buffers[slot][:n].copy_(accept_lens.to(torch.int64), non_blocking=self.cuda)
        event = None
        if self.cuda:
            event = self.event()
            event.record()
        self.waiting.append((slot, n, event, tag))
        return True

    def ready(self) -> List[Tuple[object, int]]:
        """(tag, tokens) of the steps whose copy completed, oldest first."""
        out = []
        while self.waiting and (self.waiting[0][2] is None or self.waiting[0][2].query()):
            slot, n, _, tag = self.waiting.popleft()
            out.append((tag, int(self.buffers[slot][:n].sum())))
            self.free.append(slot)
        return out


@dataclass
class AdaptiveSteps:
    """The worker's side of the adaptive verify: ``begin`` at each decode step (settles the previous
    step's period, takes the copies that completed, chooses the step's kind), ``committed`` with
    the step's device accept lengths, ``interrupted`` at a prefill or idle batch (the period of the
    step before it is not a decode step's). ``clock`` is the host's monotonic clock in seconds."""

    choice: AdaptiveVerify
    readback: AcceptReadback
    clock: Callable[[], float]
    last: Optional[_Step] = None
    measured: List[StepSample] = field(default_factory=list)  # every sample recorded, for the log

    def _settle(self, step: _Step) -> None:
        if step.settled and not step.recorded and step.tokens is not None and step.seconds is not None:
            step.recorded = True
            sample = StepSample(step.kind, step.batch_size, step.seconds, step.tokens)
            self.choice.record(sample)
            self.measured.append(sample)

    def begin(self, batch_size: int) -> StepVerify:
        now = self.clock()
        prev = self.last
        for tag, tokens in self.readback.ready():
            tag.tokens = tokens
            if tag is not prev:
                self._settle(tag)
        if prev is not None:
            if prev.measured:  # its period waited on its own kind's work (the step before it was of it)
                prev.seconds = now - prev.started
            prev.settled = True
            self._settle(prev)
        kind = self.choice.choose(batch_size)
        same = prev is not None and prev.kind is kind and batch_bucket(prev.batch_size) == batch_bucket(batch_size)
        self.last = _Step(kind, int(batch_size), now, measured=same)
        return kind

    def committed(self, accept_lens: torch.Tensor) -> None:
        """The current step's accept lengths (device); not measured when no readback slot is free."""
        if self.last is not None:
            self.readback.push(accept_lens, self.last)

    def interrupted(self) -> None:
        if self.last is not None:
            self.last.settled = True
            self._settle(self.last)
        self.last = None
