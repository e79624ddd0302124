"""`python tools/plan.py ARGS` is `sgl-overlay plan ARGS` (docs/plan.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.execv(sys.executable, [sys.executable, "-P", "-m", "sgl_overlay", "plan", *sys.argv[1:]])
