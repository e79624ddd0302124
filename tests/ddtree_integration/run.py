"""Parent side of the probes: one fresh interpreter per probe (see child.py),
through the harness's own child runner."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay.harness.layout import source_root
from sgl_overlay.harness.run import run_child

REPO = Path(__file__).resolve().parents[2]   # tests.ddtree_integration.* import from the checkout


def probe(tree: Path, name: str, timeout: float = 180.0, module: str = "tests.ddtree_integration.probes", **args) -> dict:
    result = run_child(source_root(Path(tree)), {"probe": name, "args": args, "module": module}, timeout=timeout,
                       module="tests.ddtree_integration.child", path=(REPO,))
    if result.get("completed") is False and result.get("error", {}).get("type") == "ChildFailed":
        raise RuntimeError(f"probe {name} on {tree}: {result['error']['message']}")
    return result
