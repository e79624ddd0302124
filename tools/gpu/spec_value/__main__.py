"""python3 -m tools.gpu.spec_value: the command line (cli.main)."""
import sys

from .cli import main

sys.exit(main())
