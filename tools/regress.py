"""`python tools/regress.py ARGS` is `sgl-overlay regress ARGS` (docs/regress.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.execv(sys.executable, [sys.executable, "-P", "-m", "sgl_overlay", "regress", *sys.argv[1:]])
