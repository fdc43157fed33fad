#!/bin/sh
# This pool's instances, one id a line: those whose label is one of its machines' names.
set -eu
. "$(dirname "$0")/../names.sh"
instances=$(vastai show instances --raw)
printf '%s\n' "$instances" | python3 -c '
import json, re, sys
mine = re.compile(sys.argv[1])
for instance in json.load(sys.stdin):
    if mine.search(instance.get("label") or ""):
        print(instance["id"])' "$(gf_pattern)"
