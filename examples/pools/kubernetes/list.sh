#!/bin/sh
# This pool's pods, one name a line (ended ones too: a pod left after its worker is a stray).
set -eu
. "$(dirname "$0")/../names.sh"
pods=$(kubectl get pods --output name)
printf '%s\n' "$pods" | sed 's|^pod/||' | awk -v mine="$(gf_pattern)" '$0 ~ mine'
