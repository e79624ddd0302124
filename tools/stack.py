"""`python tools/stack.py ARGS` is `sgl-overlay stack ARGS` (docs/stack.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.execv(sys.executable, [sys.executable, "-P", "-m", "sgl_overlay", "stack", *sys.argv[1:]])
