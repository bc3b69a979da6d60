#!/usr/bin/env bash
# refold's checks, in the order CI runs them: lint, types, then the test suite.
# The README's test command and .ci/run both call this script, so they cannot drift apart.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/messages -x).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== ruff check src tests"
ruff check src tests
echo "== mypy (files and options from pyproject.toml [tool.mypy])"
mypy
echo "== pytest"
# pytest exits 5 when it collected no tests; with `set -e` that fails the run, as it should.
# The tests run in one worker process per CPU (pytest-xdist); REFOLD_TEST_WORKERS=0 runs them
# in this process instead (a debugger, -s), or sets another number of workers.
pytest -q -n "${REFOLD_TEST_WORKERS:-auto}" "$@"
