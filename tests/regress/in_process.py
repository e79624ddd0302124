"""A run's context built in the test's own interpreter, as the child builds it."""
import contextlib
import os

from sgl_overlay.harness import layout, load_scenario
from sgl_overlay.harness.child.drivers import Context


@contextlib.contextmanager
def context(root, scenario: str):
    """``Context`` for ``scenario`` on the tree at ``root``, closed at the end.
    The environment variables the tree's own code sets when it is imported
    (``sglang/srt/environ.py`` copies each ``SGL_*`` to ``SGLANG_*``) are put
    back too: the harness leaves them to the child's end, the tests cannot."""
    environ = dict(os.environ)
    try:
        ctx = Context(root, layout.detect(root), load_scenario(scenario).to_request())
        try:
            yield ctx
        finally:
            ctx.close()
    finally:
        os.environ.clear()
        os.environ.update(environ)
