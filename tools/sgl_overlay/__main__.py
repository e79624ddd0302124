"""sgl-overlay COMMAND [ARGS...]: the project's tools, one command each.

  apply    lock + stack -> a verified patched SGLang tree and wheel (docs/apply.md)
  bisect   the upstream release or commit that broke or fixed a test (docs/bisect.md)
  regress  SGLang's real KV-cache sizing code against a scenario (docs/regress.md)
  plan     will this model start on this GPU with these flags (docs/plan.md)
  stack    rebase, refresh, export and lint the patch stack (docs/stack.md)
  bundle   the patched wheel + runtime wheels for a GPU machine without a network (docs/bundle.md)
  imports  what a server's start imports that the GPU machine and a bundle lack (docs/bundle.md)

`sgl-overlay --version`: this package's version and the pin (upstream.lock)
of the checkout it would work on.
`python tools/NAME.py ARGS...` is the same as `sgl-overlay NAME ARGS...`.
Each works on the checkout given with --root DIR, else the script's own
(tools/NAME.py), else the nearest one at or above the current directory
(docs/checkouts.md).
"""
import importlib
import sys

COMMANDS = ("apply", "bisect", "regress", "plan", "stack", "bundle", "imports")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    from . import project
    project.take_shim_checkout()
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(version_line())
        return 0
    if argv[0] not in COMMANDS:
        print(f"error: sgl-overlay: unknown command {argv[0]!r}", file=sys.stderr)
        print(f"hint: one of {', '.join(COMMANDS)}; see sgl-overlay --help", file=sys.stderr)
        return 2
    from . import cli
    try:
        command = importlib.import_module(f"{__package__}.commands.{argv[0]}")
    except Exception as e:  # noqa: BLE001 - never a traceback on the terminal (cli.run's rule)
        return cli._report(cli.unexpected(e, argv[0]), "--json" in argv)
    return cli.run(command.main, argv[1:])


def version_line():
    """``sgl-overlay VERSION`` and, inside a checkout, the SGLang its
    upstream.lock pins (what a build there would be made from)."""
    from . import TOOL_VERSION, lock, project
    from .errors import OverlayError
    line = f"sgl-overlay {TOOL_VERSION}"
    try:
        root = project.find_root()
        pin = lock.load(root / "upstream.lock")
    except OverlayError:
        return line + " (no checkout here: run it in one, or see docs/checkouts.md, for the pin)"
    return f"{line} (checkout {root}: SGLang {pin.tag}, commit {pin.commit[:12]}, upstream.lock)"


if __name__ == "__main__":
    sys.exit(main())
