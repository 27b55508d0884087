#!/bin/sh
# A stand-in for a real agent: reads the task from stdin, "works", prints a result.
# Exit 0 reports the task done with this output; any other exit fails it.
task=$(cat)
echo "$(hostname) did: $task"
