#!/bin/sh
# Remove the pod GPUFLEET_INSTANCE_ID; one already gone is no error.
set -eu
if ! runpodctl remove pod "$GPUFLEET_INSTANCE_ID" >&2; then
    if "$(dirname "$0")/list.sh" | grep -qxF "$GPUFLEET_INSTANCE_ID"; then exit 1; fi
fi
