#!/bin/sh
# A gpufleet worker in a Kubernetes pod, in kubectl's current context and namespace.
#   "launch": ["examples/pools/kubernetes/launch.sh", "python:3.12-slim", "1"]
# The arguments: the image (one with pip), and the GPUs the pod asks (nvidia.com/gpu).
# The token goes in a Secret of the pod's name, written on stdin: never an argument.
set -eu
. "$(dirname "$0")/../names.sh"
name=$(gf_name "$GPUFLEET_WORKER_NAME")
image=${1:-python:3.12-slim}
gpus=${2:-1}
kubectl apply -f - >&2 <<MANIFEST
apiVersion: v1
kind: Secret
metadata:
  name: $name
  labels: {app.kubernetes.io/managed-by: gpufleet}
stringData:
  token: "$GPUFLEET_WORKER_TOKEN"
---
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {app.kubernetes.io/managed-by: gpufleet}
spec:
  restartPolicy: Never
  containers:
    - name: worker
      image: "$image"
      command: ["sh", "-c", "pip install gpufleet && exec gpufleet worker"]
      env:
        - {name: GPUFLEET_ORCHESTRATOR_URL, value: "$GPUFLEET_ORCHESTRATOR_URL"}
        - {name: GPUFLEET_WORKER_NAME, value: "$GPUFLEET_WORKER_NAME"}
        - {name: GPUFLEET_WORKER_PERSISTENT, value: "$GPUFLEET_WORKER_PERSISTENT"}
        - {name: GPUFLEET_POOL, value: "$GPUFLEET_POOL"}
        - name: GPUFLEET_WORKER_TOKEN
          valueFrom: {secretKeyRef: {name: $name, key: token}}
      resources:
        limits: {nvidia.com/gpu: "$gpus"}
MANIFEST
echo "$name"
