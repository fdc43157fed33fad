#!/bin/sh
# This pool's pods, one id a line: `runpodctl get pod` lists ID and NAME first.
set -eu
. "$(dirname "$0")/../names.sh"
pods=$(runpodctl get pod)
printf '%s\n' "$pods" | awk -v mine="$(gf_pattern)" 'NR > 1 && $2 ~ mine { print $1 }'
