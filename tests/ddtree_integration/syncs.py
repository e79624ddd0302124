"""Count the host synchronisations a decode step's own code would cause on a GPU.

On a GPU, reading a device tensor's value on the host (``.item()``,
``.tolist()``, ``.cpu()``, ``bool()``/``int()`` of a tensor, a boolean-mask
index or ``nonzero`` whose result size depends on the data, a device-to-host
copy, ...) waits for the device: the host stops queueing work, and the
overlap scheduler's gain is lost.  On a CPU nothing waits, so these calls are
counted instead: a ``TorchFunctionMode`` sees every such call; it is a sync
when the tensor read is not a host tensor (``standins.Host``: the scheduler's
``seq_lens_cpu`` mirror and the overlap reservation's bounds, which live on the
host in a real server) and the call comes from the SGLang tree's own code (the
frame that calls torch lies under the tree's root).  Calls made by the
stand-ins (the toy models and the CPU versions of the kernels, which run on the
device in a real server) are not counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from tests.ddtree_integration.standins import Host

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_THIS = str(Path(__file__).resolve())

# Tensor reads whose value the host needs at once.
_READS = {
    "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "__complex__",
    "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "equal", "allclose",
}


def _is_host(x) -> bool:
    return isinstance(x, Host)


def _device_tensors(xs):
    return [x for x in xs if isinstance(x, torch.Tensor) and not _is_host(x)]


def _to_host(args, kwargs) -> bool:
    """A copy to the host: SGLang writes those with the literal ``"cpu"``
    (``x.to("cpu")``); the stand-ins' device (the GPU of a real server) is the
    object ``torch.device("cpu")``, which ``x.to(self.device)`` names."""
    dev = kwargs.get("device")
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            dev = a
    return isinstance(dev, str) and dev.startswith("cpu")


def _why(func, args, kwargs):
    """Why this call would wait for the device, or None."""
    name = getattr(func, "__name__", "")
    if not args:
        return None
    self = args[0]
    if name in _READS:
        dev = _device_tensors([self])
        return f"{name}() of a device tensor" if dev else None
    if name in ("__getitem__", "__setitem__") and len(args) > 1 and not _is_host(self):
        idx = args[1] if isinstance(args[1], tuple) else (args[1],)
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in idx):
            return f"{name} with a boolean mask (result size read from the device)"
    if name == "repeat_interleave" and kwargs.get("output_size") is None:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        if isinstance(repeats, torch.Tensor) and not _is_host(repeats):
            return "repeat_interleave with device repeats and no output_size"
    if name == "to" and not _is_host(self) and _to_host(args, kwargs):
        return "to(cpu): a device-to-host copy"
    if name == "copy_" and _is_host(self) and len(args) > 1 and _device_tensors([args[1]]):
        if kwargs.get("non_blocking") or (len(args) > 2 and args[2] is True):
            return None  # queued on the stream into pinned memory; read once its event completes
        return "copy_ of a device tensor into a host tensor"
    return None


class SyncCounter(TorchFunctionMode):
    """``with SyncCounter(tree_root) as c: ...``; ``c.syncs``: (reason, file:line) of each."""

    def __init__(self, tree_root):
        super().__init__()
        self.root = str(Path(tree_root).resolve())
        self.syncs = []

    def _caller(self):
        f = sys._getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            if not fn.startswith(_TORCH_DIR) and fn != _THIS:
                return fn, f.f_lineno
            f = f.f_back
        return "", 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = _why(func, args, kwargs)
        if why is not None:
            fn, line = self._caller()
            if fn.startswith(self.root):
                self.syncs.append((why, f"{fn[len(self.root) + 1:]}:{line}"))
        return func(*args, **kwargs)
