"""The stack tests use the apply tests' fixtures (the pinned base tree, the
patch maker, scratch projects)."""
from tests.apply.conftest import base_tree, lock, patches, project  # noqa: F401
