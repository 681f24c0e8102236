"""`python -m launcher` entry point."""

import sys

from launcher.cli.main import main

sys.exit(main())
