"""`python tools/apply.py ARGS` is `sgl-overlay apply ARGS` (docs/apply.md), on this script's checkout (docs/checkouts.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
os.environ["SGL_OVERLAY_SHIM_CHECKOUT"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.execv(sys.executable, [sys.executable, "-P", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launch.py"), "apply", *sys.argv[1:]])
