#!/bin/sh
# A gpufleet worker on a Vast.ai instance: the cheapest offer matching the first argument.
#   "launch": ["examples/pools/vastai/launch.sh", "gpu_name=RTX_4090 num_gpus=1 verified=true",
#              "--image", "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", "--disk", "40"]
# The other arguments go to `vastai create instance`. vastai takes an instance's environment
# as an argument only: the worker's token is visible in this machine's process list while
# the command runs.
set -eu
. "$(dirname "$0")/../names.sh"
query=${1:?give the offers to choose from, e.g. "gpu_name=RTX_4090 num_gpus=1"}
shift
name=$(gf_name "$GPUFLEET_WORKER_NAME")
offer=$(vastai search offers "$query rentable=true" -o dph_total --raw | python3 -c '
import json, sys
offers = json.load(sys.stdin)
print(offers[0]["id"] if offers else "")')
if [ -z "$offer" ]; then
    echo "no Vast.ai offer matches $query" >&2
    exit 1
fi
said=$(vastai create instance "$offer" --label "$name" --raw \
    --env "-e GPUFLEET_ORCHESTRATOR_URL=$GPUFLEET_ORCHESTRATOR_URL -e GPUFLEET_WORKER_TOKEN=$GPUFLEET_WORKER_TOKEN -e GPUFLEET_WORKER_NAME=$GPUFLEET_WORKER_NAME -e GPUFLEET_WORKER_PERSISTENT=$GPUFLEET_WORKER_PERSISTENT -e GPUFLEET_POOL=$GPUFLEET_POOL" \
    --onstart-cmd 'pip install gpufleet && gpufleet worker' "$@")
printf '%s\n' "$said" >&2
# With --raw, vastai answers {"success": true, "new_contract": <instance id>}.
printf '%s\n' "$said" | python3 -c 'import json, sys; print(json.load(sys.stdin)["new_contract"])'
