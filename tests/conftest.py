"""Options shared by the test folders."""


def pytest_addoption(parser):
    parser.addoption(
        "--tree",
        action="store",
        default=None,
        metavar="PATH",
        help="SGLang source tree for tests/regress/test_tree.py "
        "(default: build/sglang, the tree tools/apply.py builds)",
    )
