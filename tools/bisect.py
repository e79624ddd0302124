"""`python tools/bisect.py ARGS` is `sgl-overlay bisect ARGS` (docs/bisect.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.execv(sys.executable, [sys.executable, "-P", "-m", "sgl_overlay", "bisect", *sys.argv[1:]])
