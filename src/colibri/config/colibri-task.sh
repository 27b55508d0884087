#!/bin/sh
# A stand-in for an AI agent, to try Colibri without one. A workspace's session runs it once
# per task, in the workspace's folder:   colibri-task.sh [WORKSPACE]
#
# - The task's text arrives on stdin.
# - Given WORKSPACE, it hands a child task to it with `colibri submit --to WORKSPACE …`; the
#   workspace it runs in must list WORKSPACE in its send_to, or the daemon refuses.
#   (`colibri` is the one of the harness running the session: first on the session's PATH.)
#   (`colibri` is the one of the harness running the session: first on the session's PATH.)
# - It ends with one line of JSON shaped like the result of `claude -p --output-format json`:
#   Colibri takes "result" as the task's output, and total_cost_usd and the usage tokens as
#   what the session cost (see `colibri cost`). The figures here are made up.
# - Exit 0 reports the task done; any other exit fails it, with the end of stderr as why.
set -eu

task=$(cat)
first_line=$(printf '%s\n' "$task" | head -n 1)
sleep 1  # "working": long enough to see the task running in `colibri list`
did="worked on: $first_line"
if [ $# -gt 0 ]; then
    child=$(colibri submit --to "$1" "the $1 part of: $first_line")
    did="$did; handed $child to $1"
fi
# The summary as a JSON string: backslashes and quotes escaped, control characters dropped.
summary=$(printf '%s' "$did" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')
printf '{"result": "%s", "total_cost_usd": 0.01, "usage": {"input_tokens": 1200, "output_tokens": 80}}\n' "$summary"
