#!/usr/bin/env bash
# The suite green under load, again and again: RUNS runs of the README's test command (or of
# the pytest arguments given), each with two busy loops beside it, from a shell that ignores
# SIGINT and SIGHUP (as a background job or nohup leaves them). Prints each run's result and
# time, and what it left: processes under no test, and the PostgreSQL schemas of test boards.
#
#   bench/suite_under_load.sh                          # 5 runs of the whole suite
#   RUNS=2 bench/suite_under_load.sh tests/postgres    # 2 runs of some tests
#   RUNS=3 COLIBRI_TEST_STORE=postgresql bench/suite_under_load.sh tests/daemon tests/postgres
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
python=.venv/bin/python
trap '' INT HUP
busy=()
cleanup() { ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
for _ in 1 2; do sh -c 'while :; do :; done' & busy+=($!); done
green=0
for run in $(seq "$runs"); do
  start=$(date +%s)
  log=$(mktemp /tmp/colibri-suite-run.XXXXXX)
  "$python" -m pytest -q -p no:cacheprovider "$@" >"$log" 2>&1
  code=$?
  seconds=$(($(date +%s) - start))
  summary=$(tail -n 1 "$log")
  # This checkout's processes only: another checkout's tests may be running beside. One on
  # its way out is given a second.
  sleep 1
  left=$(pgrep -af -- "^$PWD/\.venv/bin/(python3? -m colibri|colibri) ")
  echo "run $run: exit $code in ${seconds}s: $summary; colibri processes left: $(grep -c . <<<"$left")"
  [[ -n $left ]] && echo "$left"
  if ((code == 0)); then green=$((green + 1)); else grep -E '^(FAILED|ERROR)' "$log"; echo "log: $log"; fi
done
schemas=$(psql -h 127.0.0.1 -U postgres -d test -Atc \
  "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 't\_%'" 2>/dev/null || echo "?")
echo "green $green of $runs; test schemas left in the test database: $schemas"
((green == runs))
