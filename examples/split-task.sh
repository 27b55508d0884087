#!/bin/sh
# A stand-in for an agent that splits its task: it hands part of it to the `web` workspace,
# then reports, with its cost, the way `claude -p --output-format json` does.
task=$(cat)
colibri submit --to web "the web part of: $task" >/dev/null
printf '{"result": "split %s; web has its part", "total_cost_usd": 0.02, "usage": {"input_tokens": 1200, "output_tokens": 80}}\n' "$task"
