"""What a server's start imports that the GPU machine and a bundle lack (docs/bundle.md).

  python tools/imports.py --bundle build/bundle-0.5.16 --machine-packages machine.txt

Reads the module-level imports of the bundle's SGLang wheel (or --tree: a
folder holding sglang/, or a wheel) from the start's modules (--root,
default sglang.launch_server and sglang.srt.entrypoints.http_server, whose
server launch_server imports inside a function), never importing them, and
prints the third-party top-level modules that neither the machine
(--machine-packages: its `pip list --format freeze`, or names one a line or
comma-separated; default the machine the bundle expects: torch, triton,
numpy, safetensors) nor the bundle's wheels provide, with the modules and
lines that import them: first those every start imports, then those under a
module-level `if` (another platform, an environment variable).

Exit codes: 0 nothing that every start imports is missing, 1 something is
(a wheel or a stand-in is needed; also a module of the tree's own packages
that the tree lacks and every start imports), 2 bad usage: no --bundle or --tree, a path that is not
there, a bundle without bundle.json, a --root the tree lacks (docs/exit-codes.md).
"""
import argparse
import json
from pathlib import Path

from .. import bundle, cli, start_imports
from ..errors import FAILED, OK, UsageError

ROOTS = ("sglang.launch_server", "sglang.srt.entrypoints.http_server")


def parse(argv):
    ap = cli.Parser(prog="python tools/imports.py", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--bundle", metavar="DIR", help="a bundle tools/bundle.py wrote: its wheels are provided, "
                                                    "its SGLang wheel is the tree unless --tree is given")
    ap.add_argument("--tree", metavar="PATH", help="a folder holding sglang/ (an unpacked wheel) or a wheel")
    ap.add_argument("--machine-packages", metavar="FILE",
                    help="the GPU machine's `pip list --format freeze` or a list of names (default: "
                         + ", ".join(bundle.PROVIDED) + ")")
    ap.add_argument("--root", metavar="MODULE", action="append",
                    help="a module the start runs (repeat; default " + " ".join(ROOTS) + ")")
    ap.add_argument("--python", default="3.12", help="the machine's Python, for its standard library (default 3.12)")
    cli.add_output(ap)
    return ap.parse_args(argv)


def _existing(path, what):
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} {path} does not exist", hint=f"give an existing {what.lstrip('-')}")
    return p


def inputs(args):
    """(tree path, the bundle's other wheels, machine distributions, python) from the arguments."""
    if not (args.bundle or args.tree):
        raise UsageError("give --bundle DIR (a bundle tools/bundle.py wrote) or --tree PATH",
                         hint="python tools/imports.py --bundle build/bundle-0.5.16")
    python = cli.python_version(args.python)
    tree, wheels = None, []
    if args.bundle:
        b = _existing(args.bundle, "--bundle")
        manifest = b / "bundle.json"
        if not manifest.is_file():
            raise UsageError(f"{b} has no bundle.json", hint="give the --out folder of tools/bundle.py")
        m = json.loads(manifest.read_text())
        tree = b / (m.get("patched_wheel") or m["release_wheel"])
        wheels = sorted(w for w in b.glob("*.whl") if w.name != tree.name)
    if args.tree:
        tree = _existing(args.tree, "--tree")
    if args.machine_packages:
        machine = start_imports.parse_packages(_existing(args.machine_packages, "--machine-packages").read_text())
    else:
        machine = start_imports.parse_packages("\n".join(bundle.PROVIDED))
    return tree, wheels, machine, python


def _condition(w):
    if w["if"]:
        return f"  (if {w['if']})"
    return "  (its module is imported only under a condition)" if w["module_conditional"] else ""


def text(d):
    lines = [f"start of {d['tree']} from {', '.join(d['roots'])}: {d['modules']} modules "
             f"({d['modules_always']} on every start)"]
    for kind, title in (("missing", "missing, imported by every start"),
                        ("missing_conditional", "missing, imported under a condition")):
        for top, where in d[kind].items():
            lines.append(f"{title}: {top}")
            lines += [f"    {w['at']}" + _condition(w) for w in where[:5]]
            if len(where) > 5:
                lines.append(f"    ... and {len(where) - 5} more")
    for mod, where in d["missing_internal"].items():
        lines.append(f"missing from the tree: {mod}")
        lines += [f"    {w['at']}" + _condition(w) for w in where[:5]]
    for mod, err in d["unparsed"].items():
        lines.append(f"not read: {mod}: {err} (this interpreter's parser)")
    if not (d["missing"] or d["missing_internal_always"]):
        lines.append("nothing that every start imports is missing")
    return "\n".join(lines)


def main(argv):
    args = parse(argv)
    progress = cli.Progress("imports", quiet=args.quiet)
    tree_path, wheels, machine, python = inputs(args)
    roots = args.root or list(ROOTS)
    progress(f"reading {tree_path.name} and {len(wheels)} bundled wheel(s)")
    tree = start_imports.Tree(tree_path)
    absent = [r for r in roots if r not in tree.modules]
    if absent:
        raise UsageError(f"{tree_path} has no module {', '.join(absent)}",
                         hint="give --tree a folder holding sglang/ or an SGLang wheel, and --root modules it has")
    provided = set().union(*(start_imports.wheel_tops(w) for w in wheels))
    w = start_imports.walk(tree, roots)
    always, conditional = start_imports.missing(w.external, python, machine, provided)
    d = {"tree": str(tree_path), "roots": roots, "modules": w.modules, "modules_always": w.always,
         "bundle_wheels": [x.name for x in wheels], "missing": always, "missing_conditional": conditional,
         "missing_internal": w.internal_missing, "unparsed": w.unparsed,
         "missing_internal_always": sorted(m for m, where in w.internal_missing.items()
                                           if any(map(start_imports.unconditional, where)))}
    return cli.emit(d, args.json, text(d), exit_code=FAILED if always or d["missing_internal_always"] else OK)
