"""A small table of common GPUs: the total memory the driver reports.

``total_mib`` is the total in nvidia-smi's "Memory-Usage" column (``N MiB /
TOTAL MiB``), which is what ``torch.cuda.mem_get_info`` and SGLang's
``get_device_memory_capacity`` see.  Sources: public nvidia-smi outputs,
found with the exact string ``/ TOTALMiB`` next to the card's name (several
independent logs each); the RTX PRO 6000 figure is also the incident's
(docs/incidents.md).

Free memory *before* the weights load is the total minus what the process
takes first (CUDA context, NCCL, cuBLAS/cuDNN workspaces).  The planner
assumes ``DEFAULT_STARTUP_OVERHEAD_GIB`` for that and says so; explicit
``--free-gib`` figures always win.  The one measured value at hand is the
incident's RTX PRO 6000 at TP1: 97,887 MiB total (95.59 GiB) and "Load weight
begin. avail mem=94.24 GB", i.e. 1.35 GiB taken before the load.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30

# Assumed start-up overhead per GPU before the weights load (GiB).  A round
# figure, deliberately not fitted to the incident (which measured 1.35 GiB):
# docs/results/plan.md reports how far the estimate lands from the logged figures.
DEFAULT_STARTUP_OVERHEAD_GIB = 1.0


@dataclass(frozen=True)
class Gpu:
    name: str
    total_mib: int
    source: str
    aliases: tuple[str, ...] = ()
    # What torch.cuda reports for the card (the release's own flag resolution
    # reads both: harness/child/resolution.py): get_device_name, get_device_capability
    device_name: str = ""
    capability: tuple[int, int] = (0, 0)

    @property
    def total_gib(self) -> float:
        return self.total_mib * MIB / GIB


_SRC = "nvidia-smi Memory-Usage total in public logs ('/ {}MiB' next to '{}')"

GPUS = (
    Gpu("RTX 5090", 32607, _SRC.format(32607, "NVIDIA GeForce RTX 5090"), ("5090", "geforce rtx 5090"),
        "NVIDIA GeForce RTX 5090", (12, 0)),
    Gpu("RTX PRO 6000 Blackwell", 97887,
        _SRC.format(97887, "NVIDIA RTX PRO 6000 Blackwell") + "; the incident log in docs/incidents.md",
        ("rtx pro 6000", "pro 6000", "rtx pro 6000 blackwell server edition",
         "rtx pro 6000 blackwell workstation edition"),
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0)),
    Gpu("L40S", 46068, _SRC.format(46068, "NVIDIA L40S"), (), "NVIDIA L40S", (8, 9)),
    Gpu("A100 80GB", 81920, _SRC.format(81920, "NVIDIA A100 80GB PCIe / A100-SXM4-80GB"),
        ("a100", "a100-80gb", "a100 80gb pcie", "a100-sxm4-80gb"), "NVIDIA A100 80GB PCIe", (8, 0)),
    Gpu("H100 80GB", 81559, _SRC.format(81559, "NVIDIA H100 80GB HBM3 / H100 PCIe"),
        ("h100", "h100 80gb hbm3", "h100 pcie", "h100-sxm"), "NVIDIA H100 80GB HBM3", (9, 0)),
    Gpu("H200", 143771, _SRC.format(143771, "NVIDIA H200"), ("h200 sxm", "h200 141gb"), "NVIDIA H200", (9, 0)),
    Gpu("B200", 183359, _SRC.format(183359, "NVIDIA B200"), (), "NVIDIA B200", (10, 0)),
)


def _key(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower().replace("nvidia", "")).strip()


def names() -> list[str]:
    return [g.name for g in GPUS]


def lookup(name: str) -> Gpu | None:
    k = _key(name)
    for g in GPUS:
        if k == _key(g.name) or k in {_key(a) for a in g.aliases}:
            return g
    return None


def suggest(name: str) -> list[str]:
    keys = {_key(g.name): g.name for g in GPUS}
    keys.update({_key(a): g.name for g in GPUS for a in g.aliases})
    return sorted({keys[k] for k in difflib.get_close_matches(_key(name), list(keys), n=3, cutoff=0.5)})
