"""`python tools/apply.py ARGS` is `sgl-overlay apply ARGS` (docs/apply.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.execv(sys.executable, [sys.executable, "-P", "-m", "sgl_overlay", "apply", *sys.argv[1:]])
