#!/bin/sh
# Delete the pod GPUFLEET_INSTANCE_ID and its Secret; ones already gone are no error.
set -eu
kubectl delete pod,secret "$GPUFLEET_INSTANCE_ID" --ignore-not-found --wait=false >&2
