"""`python tools/bundle.py ARGS` is `sgl-overlay bundle ARGS` (docs/bundle.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.execv(sys.executable, [sys.executable, "-P", "-m", "sgl_overlay", "bundle", *sys.argv[1:]])
