"""The optional C scorer (``refold._scorer``); everything else is in pyproject.toml.

``optional=True``: where no C compiler or Python headers are found, the build says so and
refold installs without it (its search then scores in Python: the same results, slower).
"""

import sys

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "refold._scorer", ["src/refold/_scorer.c"], optional=True,
    # no fused multiply-add: every float must be the one the Python paths compute
    extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"],
)])
