#!/bin/sh
# A gpufleet worker on a SkyPilot cluster of its own, on any cloud SkyPilot reaches.
#   "launch": ["examples/pools/skypilot/launch.sh", "--gpus", "H100:1", "--use-spot"]
# The arguments go to `sky launch` (resources, cloud, region). The cluster tears itself down
# when the worker exits (--down): an ephemeral worker's after its job.
set -eu
. "$(dirname "$0")/../names.sh"
cluster=$(gf_name "$GPUFLEET_WORKER_NAME")
# `--env NAME` without a value passes this environment's: the token is never an argument.
# SkyPilot's own output goes to stderr (kept with the launch); stdout's last line is the id.
sky launch --yes --detach-run --down --cluster "$cluster" \
    --env GPUFLEET_ORCHESTRATOR_URL --env GPUFLEET_WORKER_TOKEN --env GPUFLEET_WORKER_NAME \
    --env GPUFLEET_WORKER_PERSISTENT --env GPUFLEET_POOL \
    "$@" 'pip install gpufleet && gpufleet worker' >&2
echo "$cluster"
