"""The log parser's optional C accelerator; everything else is in pyproject.toml.

`optional=True`: without a C compiler (or Python headers) the install goes on and the parser runs its pure-Python
path, which gives the same records (`launcher.metrics.parser.accelerated()` says which one is in use).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("launcher.metrics._stepjson", ["src/launcher/metrics/_stepjson.c"], optional=True)])
