"""One harness run in a fresh interpreter, this checkout against a baseline
checkout, interleaved in one run (the machine's load hits both alike); medians.

  python tools/bench/harness_run.py --baseline DIR [--tree PATH | --release V]
                                    [--scenario NAME] [--runs N]

DIR is another checkout (or an export: ``git archive main tools | tar -x -C DIR``);
only its ``tools/sgl_overlay`` is used.  Each run is what ``run_child`` starts:
``python -m sgl_overlay.harness.child`` with the scenario's request on stdin,
from the checkout's root, that checkout's ``tools`` first on the path.  Wall is
the process's whole life (interpreter start to exit), ``cpu`` its user + system
CPU time (less sensitive to other processes on a shared machine); ``child`` is
its own ``timing.child_total_s`` (from the child module's start).  One warm-up run per side first (the code cache).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


_PATHS: dict = {}


def _env(checkout: Path) -> dict:
    """The checkout's own ``sgl_overlay`` first on the path: a folder holding
    only a link to it (``tools/`` itself would shadow the standard library's
    ``bisect`` with the ``tools/bisect.py`` shim)."""
    if checkout not in _PATHS:
        import tempfile

        d = Path(tempfile.mkdtemp(prefix="sglo-bench-path-"))
        (d / "sgl_overlay").symlink_to(checkout.resolve() / "tools" / "sgl_overlay")
        _PATHS[checkout] = d
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(_PATHS[checkout])] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


def _check_path(checkout: Path) -> None:
    out = subprocess.run([sys.executable, "-c", "import sgl_overlay; print(sgl_overlay.__file__)"],
                         capture_output=True, text=True, cwd=checkout, env=_env(checkout), check=True).stdout
    if not Path(out.strip()).resolve().is_relative_to((checkout / "tools").resolve()):
        raise SystemExit(f"error: {checkout} does not import its own sgl_overlay (got {out.strip()})")


def _once(checkout: Path, request: str) -> tuple[float, float, dict]:
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "sgl_overlay.harness.child"], input=request, capture_output=True,
                       text=True, cwd=checkout, env=_env(checkout))
    wall = time.perf_counter() - t
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    lines = [x for x in p.stdout.splitlines() if x.strip()]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"error: the child of {checkout} failed: {p.stderr[-800:]}")
    return wall, cpu, json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, type=Path)
    ap.add_argument("--new", default=ROOT, type=Path)
    ap.add_argument("--tree", type=Path)
    ap.add_argument("--release", default="0.5.12.post1")
    ap.add_argument("--scenario", default="healthy-h200-8b")
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    from sgl_overlay.harness import load_scenario
    from sgl_overlay.release_trees import release_tree

    tree = a.tree or release_tree(a.release)
    request = json.dumps(dict(load_scenario(a.scenario).to_request(), root=str(tree)))
    sides = {"baseline": a.baseline, "new": a.new}
    for checkout in sides.values():
        _check_path(checkout)
        _once(checkout, request)  # warm-up: the code cache
    t = {k: {"wall": [], "cpu": [], "child": [], "torch": []} for k in sides}
    figures = {}
    for i in range(a.runs):
        for name, checkout in (sides.items() if i % 2 == 0 else reversed(sides.items())):
            wall, cpu, res = _once(checkout, request)
            t[name]["wall"].append(wall)
            t[name]["cpu"].append(cpu)
            t[name]["child"].append(res["timing"]["child_total_s"])
            t[name]["torch"].append(res["timing"]["import_torch_s"])
            f = res.get("figures") or {}
            figures.setdefault(name, (f.get("max_total_num_tokens"), f.get("max_running_requests")))
        print(f"round {i + 1}/{a.runs}", file=sys.stderr)
    for d in _PATHS.values():
        (d / "sgl_overlay").unlink()
        d.rmdir()
    if figures["baseline"] != figures["new"]:
        raise SystemExit(f"error: the two checkouts disagree: {figures}")
    med = {k: {m: statistics.median(v) for m, v in d.items()} for k, d in t.items()}
    print(json.dumps({"tree": str(tree), "scenario": a.scenario, "runs": a.runs, "medians_s": med,
                      "ratio_wall": round(med["new"]["wall"] / med["baseline"]["wall"], 3),
                      "ratio_cpu": round(med["new"]["cpu"] / med["baseline"]["cpu"], 3),
                      "ratio_child": round(med["new"]["child"] / med["baseline"]["child"], 3),
                      "figures": figures["new"]}, indent=1))


if __name__ == "__main__":
    main()
