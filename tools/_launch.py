"""What every shim in tools/ starts (python -P tools/_launch.py NAME ARGS):
`sgl-overlay NAME ARGS`, or, where the sgl_overlay package is not installed
for this interpreter, how to install it (exit 2, docs/exit-codes.md)."""
import os
import sys

try:
    from sgl_overlay.__main__ import main
except ModuleNotFoundError as e:
    if e.name != "sgl_overlay":
        raise
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"error: tools/{sys.argv[1]}.py needs the sgl_overlay package, which is not installed for "
          f"{sys.executable}", file=sys.stderr)
    print(f"hint: install it from the checkout: cd {checkout} && {sys.executable} -m pip install -e .  "
          f"(README.md, 'Set up on a fresh machine')", file=sys.stderr)
    sys.exit(2)
sys.exit(main())
