"""`python tools/imports.py ARGS` is `sgl-overlay imports ARGS` (docs/bundle.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.execv(sys.executable, [sys.executable, "-P", "-m", "sgl_overlay", "imports", *sys.argv[1:]])
