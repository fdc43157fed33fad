#!/bin/sh
# Tear down the cluster GPUFLEET_INSTANCE_ID; one already gone is no error.
set -eu
if ! sky down --yes "$GPUFLEET_INSTANCE_ID" >&2; then
    if "$(dirname "$0")/list.sh" | grep -qxF "$GPUFLEET_INSTANCE_ID"; then exit 1; fi
fi
