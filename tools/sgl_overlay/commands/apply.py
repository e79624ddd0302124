"""Build the patched SGLang tree: upstream.lock + patches/ + overlay/.

  python tools/apply.py                 build build/sglang (or --out DIR)
  python tools/apply.py --check         apply the series in a scratch tree, report per patch
  python tools/apply.py --list          the patches: topic, Upstream-Status, files, lines
  python tools/apply.py --wheel DIR     also build the installable patched wheel

Exit codes: 0 ok or up to date, 1 a patch or the overlay failed,
2 bad input or usage, 3 integrity failure (docs/exit-codes.md).
"""
import argparse
import dataclasses

from .. import artifacts, base_tree, builder, cli, lock as lockmod, project, series, wheel
from ..errors import FAILED, OK, USAGE, UsageError
from ..stack import ranges


def parse(argv):
    ap = cli.Parser(prog="python tools/apply.py", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="apply in a scratch tree and report; build nothing")
    mode.add_argument("--list", action="store_true", help="list the patches")
    ap.add_argument("--out", help="destination (default: build/sglang in the checkout)")
    ap.add_argument("--repo", metavar="URL_OR_PATH", nargs="?", const="",
                    help="take upstream from this git repository instead of the release artifact "
                         "(alone: the lock's upstream.repo)")
    ap.add_argument("--cache", metavar="DIR", help="cache directory (default: $SGL_OVERLAY_CACHE or ~/.cache/sgl-overlay)")
    ap.add_argument("--wheel", metavar="DIR", help="also write the patched wheel into DIR")
    ap.add_argument("--python", metavar="VER", action="append", default=[],
                    help="with --wheel: build from the release's wheel for this Python (3.12, cp312; "
                         "repeat or comma-separate for several; default the pinned wheel's). A wheel the lock "
                         "does not record yet is proven against the lock's tree and its sha256 recorded "
                         "(trust on first use, reported)")
    ap.add_argument("--3way", dest="three_way", action="store_true", help="let git am fall back to a 3-way merge")
    ap.add_argument("--force", action="store_true", help="replace a build that has local changes")
    ap.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                    help="if another process is writing the destination, wait up to this long for it "
                         "(default 0: refuse at once, exit 2, naming its pid)")
    ap.add_argument("--unlocked-for-bench", dest="unlocked", action="store_true", help=argparse.SUPPRESS)
    cli.add_root(ap)
    cli.add_output(ap)
    return ap.parse_args(argv)


def list_text(stack):
    rows = [(p.index, p.name, p.topic, p.upstream_status, len(p.files), f"+{p.added}/-{p.removed}")
            for p in stack.patches]
    text = cli.table(rows, ["#", "patch", "topic", "upstream-status", "files", "lines"]) if rows else "(no patches)"
    if stack.overlay:
        text += "\n\noverlay:\n" + "\n".join(f"  {o.rel}" + (" (replaces upstream)" if o.replaces else "")
                                             for o in stack.overlay)
    return text + f"\n\nstack digest {stack.digest[:16]}"


def build_for_python(lock, python, tree, args, progress):
    """``(wheel, note, recorded)``: the patched wheel from the release's wheel
    for ``python`` (None: the pinned one), fetched, its sha256 checked, its
    tree proven equal to the pin's, then the stack laid on it.  ``recorded``
    is ``{name: sha256}`` for a wheel the lock does not list yet (trust on
    first use), for the caller to write into the lock once (record_wheels)."""
    if python is None:
        return wheel.build_wheel(lock, tree, args.wheel, cache=args.cache, progress=progress), None, {}
    name = artifacts.wheel_filename(lock, python)
    fetched = artifacts.lock_wheel(lock, name, cache=args.cache, progress=progress)
    artifact, digest, known = fetched.path, fetched.sha256, fetched.trust is artifacts.Trust.PINNED
    normalized = base_tree.prove_artifact(lock, artifact, progress)
    note = None
    if not known:
        note = (f"trust on first use: recorded sha256 {digest} of {name} in {lock.path.name} "
                f"([artifact.wheels]); its python/sglang tree equals the pin's ({normalized[:12]}); "
                "later builds are checked against this record")
    w = wheel.build_wheel(lock, tree, args.wheel, cache=args.cache, progress=progress, artifact=artifact)
    w.update({"artifact_sha256": digest, "sha256_status": "verified" if known else "recorded",
              "tree_normalized": normalized})
    return w, note, ({} if known else {name: digest})


def record_wheels(lock, recorded):
    """The lock with ``recorded`` wheels' sha256 in ``[artifact.wheels]``,
    written once (atomically, lock.write) when there are any."""
    if not recorded:
        return lock
    new = dataclasses.replace(lock, wheels={**lock.wheels, **recorded})
    lockmod.write(new, lock.path)
    return lockmod.load(lock.path)


def check_text(r, lock):
    lines = []
    for p in r.patches:
        lines.append(f"{p.index}/{len(r.patches)} {p.patch}: {p.status}")
        if p.failure:
            lines.append(builder.format_failure(p.failure))
    if r.overlay.status is not builder.OverlayStatus.NONE:
        lines.append(f"overlay: {r.overlay.status}" + (f": {r.overlay.error}" if r.overlay.error else ""))
    lines.append(f"check {'passed' if r.ok else 'FAILED'}: {len(r.patches)} patch(es) on {lock.tag}")
    return "\n".join(lines)


def main(argv):
    args = parse(argv)
    if args.wait < 0:
        raise UsageError(f"--wait must be 0 or more seconds, got {args.wait:g}", hint="e.g. --wait 600")
    progress = cli.Progress("apply", quiet=args.quiet or args.list)
    root = project.find_root(args.root)
    lock = lockmod.load(root / "upstream.lock")
    if args.repo == "":
        args.repo = lock.repo
    if args.list:
        stack = series.load(root, strict=False)
        problems = [{"patch": p.name, "field": f, "error": m, "hint": h}
                    for p in stack.patches for f, m, h in series.lint(p)]
        return cli.emit({"status": "ok" if not problems else "lint", **stack.summary(), "lint": problems},
                        args.json, list_text(stack) + "".join(f"\nlint: {x['error']}" for x in problems),
                        exit_code=OK if not problems else USAGE)
    stack = series.load(root)
    ranges.refuse_outside(root, lock.version)      # a patch said not to apply to the pin: exit 2 before any work
    if args.python and not args.wheel:
        raise UsageError("--python needs --wheel DIR", hint="python tools/apply.py --wheel dist --python 3.12")
    pythons = [p for arg in args.python for p in arg.split(",") if p] or [None]
    for py in pythons:
        if py is not None:
            artifacts.wheel_filename(lock, py)   # a bad --python is refused before any work
    if args.check:
        r = builder.check(lock, stack, repo=args.repo, cache=args.cache, three_way=args.three_way, progress=progress)
        return cli.emit(r, args.json, check_text(r, lock), exit_code=OK if r.ok else FAILED)
    r = builder.build(lock, stack, args.out or root / "build" / "sglang", repo=args.repo, cache=args.cache,
                      three_way=args.three_way, force=args.force, progress=progress, wait=args.wait, locked=not args.unlocked)
    if r.status is builder.BuildStatus.UP_TO_DATE:
        text = f"{r.dest}: up to date ({len(stack.patches)} patch(es), stack {stack.digest[:12]})"
    else:
        text = (f"built {r.dest}: {lock.tag} + {len(stack.patches)} patch(es)"
                + (f" + overlay ({len(stack.overlay)} file(s))" if stack.overlay else "")
                + f", HEAD {r.manifest['head'][:12]} on branch patched")
    out = r.to_json()
    if args.wheel:
        out["wheels"], recorded = [], {}
        for py in dict.fromkeys(pythons):             # each Python once
            w, note, new = build_for_python(lock, py, r.dest, args, progress)
            recorded.update(new)
            out["wheels"].append(w)
            text += f"\nwheel: {w['path']} (version {w['version']}, from {w['artifact']})" + (f"\n  {note}" if note else "")
        out["wheel"] = out["wheels"][0]
        record_wheels(lock, recorded)
    return cli.emit(out, args.json, text, exit_code=OK)

