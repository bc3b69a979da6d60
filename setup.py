"""The optional C modules (``refold._scorer``, ``refold._btree``, ``refold._cjklen``,
``refold._jsonscan``);
everything else is in pyproject.toml.

``optional=True``: where no C compiler or Python headers are found, the build says so and
refold installs without them (its search then scores, and reads b-tree pages ahead, and the
proxy checks a request's depth and finds the part it converted before, in Python: the same
results, slower).
"""

import sys

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "refold._scorer", ["src/refold/_scorer.c"], optional=True,
    # no fused multiply-add: every float must be the one the Python paths compute
    extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"],
), Extension(
    "refold._btree", ["src/refold/_btree.c"], optional=True,
    extra_compile_args=[] if sys.platform == "win32" else ["-O2"],
), Extension(
    "refold._cjklen", ["src/refold/_cjklen.c"], optional=True,
    extra_compile_args=[] if sys.platform == "win32" else ["-O2"],
), Extension(
    "refold._jsonscan", ["src/refold/_jsonscan.c"], optional=True,
    extra_compile_args=[] if sys.platform == "win32" else ["-O2"],
)])
