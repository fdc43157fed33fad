#!/bin/sh
# A gpufleet worker in a RunPod pod.
#   "launch": ["examples/pools/runpod/launch.sh", "--gpuType", "NVIDIA GeForce RTX 4090",
#              "--imageName", "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"]
# The arguments go to `runpodctl create pod` (GPU type and count, image, cloud, price).
# runpodctl takes a pod's environment as arguments only: the worker's token is visible in
# this machine's process list while the command runs.
set -eu
. "$(dirname "$0")/../names.sh"
name=$(gf_name "$GPUFLEET_WORKER_NAME")
if ! said=$(runpodctl create pod --name "$name" \
    --env "GPUFLEET_ORCHESTRATOR_URL=$GPUFLEET_ORCHESTRATOR_URL" \
    --env "GPUFLEET_WORKER_TOKEN=$GPUFLEET_WORKER_TOKEN" \
    --env "GPUFLEET_WORKER_NAME=$GPUFLEET_WORKER_NAME" \
    --env "GPUFLEET_WORKER_PERSISTENT=$GPUFLEET_WORKER_PERSISTENT" \
    --env "GPUFLEET_POOL=$GPUFLEET_POOL" \
    --args "bash -c 'pip install gpufleet && gpufleet worker'" "$@"); then
    printf '%s\n' "$said" >&2
    exit 1
fi
printf '%s\n' "$said" >&2
# runpodctl says: pod "<id>" created for $0.690 / hr
printf '%s\n' "$said" | sed -n 's/^pod "\([^"]*\)" created.*/\1/p' | tail -n 1
