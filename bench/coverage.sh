#!/bin/sh
# Line and branch coverage of the suite, the processes it starts included (the daemons, CLIs and
# harnesses, measured through pyproject's [tool.coverage.run] `patch = subprocess`), as a table
# per package on stdout and as JSON in the file given. Arguments after it go to pytest.
#
#   nice -n 10 bench/coverage.sh /tmp/coverage.json   # the whole suite, ~20 minutes on 2 cores
#   bench/coverage.sh /tmp/coverage.json -n 0 tests/daemon/test_x.py
#
# The combined data stays in the directory printed at the end (`coverage report` or `coverage
# html` there, with COVERAGE_FILE set to it, for the lines themselves).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 OUT.json [pytest arguments...]" >&2; exit 2; }
out=$(realpath "$1")
shift
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
data=$(mktemp -d /tmp/colibri-coverage.XXXXXX)
chmod 1777 "$data"  # a test may run Python as another user
# Absolute, so that a process started in another directory writes its data here too.
export COVERAGE_FILE="$data/.coverage"
status=0
"$python" -m coverage run -m pytest "$@" || status=$?
echo "$(ls -A "$data" | grep -c '^\.coverage\.') data files (one per measured process)" >&2
"$python" -m coverage combine --quiet
"$python" -m coverage json --quiet -o "$data/files.json"
"$python" bench/coverage_table.py "$data/files.json" "$out"
echo "pytest exit status $status; data in $COVERAGE_FILE" >&2
exit $status
