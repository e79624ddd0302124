"""`python tools/bisect.py ARGS` is `sgl-overlay bisect ARGS` (docs/bisect.md), on this script's checkout (docs/checkouts.md); -P keeps tools/ off sys.path."""
import os, sys  # noqa: E401
if __name__ != "__main__": raise ImportError(f"{__file__} was imported in place of the standard library's bisect: tools/ is on sys.path (PYTHONPATH={os.environ.get('PYTHONPATH', '')!r}); take it off and run python tools/bisect.py or sgl-overlay bisect")  # noqa: E501,E701
os.environ["SGL_OVERLAY_SHIM_CHECKOUT"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.execv(sys.executable, [sys.executable, "-P", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_launch.py"), "bisect", *sys.argv[1:]])
