"""An offline bundle for a GPU machine without a network (docs/bundle.md).

  python tools/bundle.py --python 3.12 --attention-backend triton --max-mib 60 --out build/bundle

Builds the patched wheel for --python (tools/apply.py --wheel --python),
downloads the runtime wheels SGLang imports that the machine lacks
(pip download --no-deps, pip's own configuration decides the index), and
keeps the bundle within --max-mib: what it leaves out, or replaces by a slim
variant, is stated with what that disables.

  python tools/bundle.py --release 0.5.18 --python 3.12 --max-mib 61 --out build/bundle-0.5.18

With --release, a pristine bundle of another release instead: its own wheel
(no stack) and the runtime wheels at its own pins; refused (exit 1) when the
release requires another version of what the machine provides (--machine,
default torch==2.11.0 triton==3.6.0: the H200's).

--slim-release leaves out of the sglang wheel, the release's or the patched
one, what the server never imports at start (the diffusion runtime, the gRPC
module, the Rust server and image processor; local version +slim, or
+overlay.<hash>.slim for the patched wheel).  The pin's v0.5.17 bundle needs it
to fit 64 MiB.

Exit codes: 0 bundle written, 1 a required wheel does not fit the budget, or
the release cannot run on the machine, 2 bad usage, 3 integrity failure
(docs/exit-codes.md).
"""
import argparse
import os
import types

from .. import artifacts, builder, bundle, cli, lock as lockmod, project, series
from ..errors import FAILED, OK, UsageError
from .apply import build_for_python, record_wheels


def parse(argv):
    ap = cli.Parser(prog="python tools/bundle.py", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--python", default="3.12", help="the GPU machine's Python (default 3.12)")
    ap.add_argument("--platform", default="manylinux_2_34_x86_64", help="its platform tag")
    ap.add_argument("--attention-backend", default="triton",
                    help="the attention backend the servers will use (triton allows the slim sglang-kernel)")
    ap.add_argument("--max-mib", type=float, default=60.0, help="size budget of the bundle in MiB (default 60)")
    ap.add_argument("--out", help="bundle directory (default: build/bundle in the checkout)")
    ap.add_argument("--downloads", help="where downloaded wheels are kept between runs "
                                        "(default: build/bundle-downloads in the checkout)")
    ap.add_argument("--cache", metavar="DIR", help="artifact cache (as tools/apply.py)")
    cli.add_root(ap)
    ap.add_argument("--release", metavar="VERSION",
                    help="a pristine bundle of this SGLang release (its own wheel, no stack) instead of the pin's")
    ap.add_argument("--slim-release", action="store_true",
                    help="leave out of the sglang wheel (the patched one, or with --release the release's) what the "
                         "server never imports at start (" + ", ".join(bundle.RELEASE_SLIM_DROP) + "); its version "
                         "gets the local label slim")
    ap.add_argument("--machine", metavar="NAME==VERSION", action="append", default=None,
                    help="what the GPU machine provides, at which version (repeat; default "
                         + " ".join(f"{k}=={v}" for k, v in bundle.MACHINE.items()) + ")")
    cli.add_output(ap)
    return ap.parse_args(argv)


def text(d):
    lines = [f"bundle: {d['total'] / bundle.MIB:.1f} MiB of {d['budget'] / bundle.MIB:.1f} MiB"]
    for c in d["chosen"]:
        lines.append(f"  {c.get('file', c['name'])}  {c['size'] / bundle.MIB:.1f} MiB ({c['variant']})")
    for x in d["left_out"]:
        lines.append(f"left out: {x['name']}: {x['reason']}" + (f"; disables {x['disables']}" if x["disables"] else ""))
    if d.get("provided"):
        lines.append("expected on the machine: " + ", ".join(d["provided"]))
    return "\n".join(lines)


def machine(given):
    """``--machine NAME==VERSION`` values -> ``{name: version}`` (MACHINE when none)."""
    if not given:
        return dict(bundle.MACHINE)
    out = {}
    for g in given:
        name, sep, version = g.partition("==")
        if not (sep and name.strip() and version.strip()):
            raise UsageError(f"--machine {g!r} is not NAME==VERSION", hint="e.g. --machine torch==2.13.0")
        out[name.strip()] = version.strip()
    return out


def pristine(args, progress):
    """--release: the release's own wheel for --python/--platform and its runtime wheels."""
    tag = "cp3%d" % cli.python_version(args.python)[1]
    wheel = artifacts.release(args.release, args.cache, progress, tags=f"{tag}-{tag}-{args.platform}").path
    return bundle.build_pristine(wheel, args.out, args.python, args.platform,
                                 {"attention-backend": args.attention_backend}, int(args.max_mib * bundle.MIB),
                                 os.path.join(args.downloads, f"release-{args.release}"), machine(args.machine),
                                 progress, slim_release=args.slim_release)


def main(argv):
    args = parse(argv)
    progress = cli.Progress("bundle", quiet=args.quiet)
    root = None
    if not (args.release and args.out and args.downloads):     # a pristine bundle with both paths needs no checkout
        root = project.find_root(args.root)
        args.out = args.out or str(root / "build" / "bundle")
        args.downloads = args.downloads or str(root / "build" / "bundle-downloads")
    if args.release:
        d = pristine(args, progress)
        return cli.emit(d, args.json, text(d), exit_code=OK if d["fits"] else FAILED)
    lock = lockmod.load(root / "upstream.lock")
    stack = series.load(root)
    r = builder.build(lock, stack, root / "build" / "sglang", cache=args.cache, progress=progress)
    wargs = types.SimpleNamespace(wheel=args.out + ".wheel", cache=args.cache)
    w, note, recorded = build_for_python(lock, args.python, r.dest, wargs, progress)
    lock = record_wheels(lock, recorded)
    if note:
        progress(note)
    release = artifacts.location(w["artifact"], args.cache)
    d = bundle.build(lock, w["path"], release, args.out, args.python, args.platform,
                     {"attention-backend": args.attention_backend}, int(args.max_mib * bundle.MIB),
                     args.downloads, progress, slim_release=args.slim_release)
    d["sha256_note"] = note
    return cli.emit(d, args.json, text(d), exit_code=OK if d["fits"] else FAILED)
