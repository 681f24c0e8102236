"""`python -m launcher` entry point."""

import sys

from launcher.cli import main

sys.exit(main())
