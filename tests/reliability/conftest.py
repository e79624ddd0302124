"""The apply tests' fixtures (a verified base tree, patches made against it)."""
from tests.apply.conftest import base_tree, lock, patches  # noqa: F401
