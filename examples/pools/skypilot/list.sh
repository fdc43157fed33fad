#!/bin/sh
# This pool's clusters, one name a line: the first column of `sky status`.
set -eu
. "$(dirname "$0")/../names.sh"
clusters=$(sky status)
printf '%s\n' "$clusters" | awk -v mine="$(gf_pattern)" '$1 ~ mine { print $1 }'
