#!/usr/bin/env bash
# A GPU machine's check: a real `gpufleet server` and `gpufleet worker` (NVML detection), then a
# CUDA job (PyTorch, one GPU) through the queue; what it saw lands in $OUT. Run from the
# repository's root with PY naming a Python that has PyTorch; where the runtime dependencies are
# missing, put their wheels (for that Python) in devcheck/whl and they are installed to /tmp/site.
# Not part of `make test` (no GPU there); the session notes record each run.
set -u
OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT"
PY=${PY:-python3}
if [ -d devcheck/whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site devcheck/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
GF=($PY -c 'import sys; from gpufleet.cli.main import main; sys.argv[0]="gpufleet"; main()')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
D=$(mktemp -d); PORT=18777; URL=http://127.0.0.1:$PORT
"${GF[@]}" server --host 127.0.0.1 --port $PORT --data-dir $D/srv > "$OUT/server.log" 2>&1 &
SRV=$!
for i in $(seq 1 100); do curl -fsS $URL/healthz >/dev/null 2>&1 && break; sleep 0.2; done
ADMIN=$(cat $D/srv/admin.token)
H="Authorization: Bearer $ADMIN"
W=$(curl -fsS -X POST $URL/api/admin/workers -H "$H" -H 'Content-Type: application/json' -d '{"name":"gpu-1","worker_type":"persistent","labels":{"where":"device"}}')
TOKEN=$($PY -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$W")
"${GF[@]}" worker --orchestrator-url $URL --worker-token $TOKEN --name gpu-1 --persistent --work-dir $D/wk > "$OUT/worker.log" 2>&1 &
WRK=$!
for i in $(seq 1 100); do curl -fsS -H "$H" $URL/api/admin/workers | grep -q '"idle"' && break; sleep 0.3; done
curl -fsS -H "$H" $URL/api/admin/workers | $PY -m json.tool > "$OUT/workers.json"; head -c 3000 "$OUT/workers.json"; echo
NGPU=${NGPU:-1}
JOB='import os, torch, time; print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES")); ok=torch.cuda.is_available(); print("cuda", ok); d="cuda" if ok else "cpu"; print("device", torch.cuda.get_device_name(0) if ok else "cpu"); a=torch.randn(4096,4096,device=d); b=a@a; s=float(b.sum()); print("matmul ok", s==s); from gpufleet import progress; progress.report(step=1,total=1,loss=0.5)'
BODY=$($PY -c 'import json,sys; print(json.dumps({"config":{"command":[sys.argv[2],"-c",sys.argv[1]]},"gpu_count":int(sys.argv[3]),"worker_labels":{"where":"device"}}))' "$JOB" "$(command -v $PY)" "$NGPU")
S=$(curl -sS -X POST $URL/api/queue/submit -H "$H" -H 'Content-Type: application/json' -d "$BODY"); echo "submit: $S"
JID=$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print(d.get("job_id") or d.get("id"))' "$S")
for i in $(seq 1 120); do st=$(curl -fsS -H "$H" $URL/api/queue/$JID | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"])'); case $st in completed|failed|cancelled) break;; esac; sleep 0.5; done
echo "job $JID: $st"
curl -fsS -H "$H" "$URL/api/queue/$JID" | $PY -m json.tool > "$OUT/job.json"
curl -fsS -H "$H" "$URL/api/queue/$JID/logs" > "$OUT/joblogs.json"; head -c 2000 "$OUT/joblogs.json"; echo
curl -fsS -H "$H" $URL/api/admin/workers | $PY -m json.tool > "$OUT/workers_after.json"
# The same, with the job run as another OS user (--run-as) and the token read from a file:
# the job still sees its GPU, and cannot read its worker's environment.
if [ "$(id -u)" = 0 ] && { id gpufleet-job >/dev/null 2>&1 || useradd --system --no-create-home gpufleet-job; }; then
  chmod 711 "$D"
  W2=$(curl -fsS -X POST $URL/api/admin/workers -H "$H" -H 'Content-Type: application/json' -d '{"name":"gpu-2","worker_type":"persistent","labels":{"where":"runas"}}')
  $PY -c 'import json,sys; print(json.loads(sys.argv[1])["token"])' "$W2" > $D/token2; chmod 600 $D/token2
  kill $WRK; wait $WRK 2>/dev/null
  "${GF[@]}" worker --orchestrator-url $URL --worker-token-file $D/token2 --name gpu-2 --persistent --work-dir $D/wk2 --run-as gpufleet-job > "$OUT/worker2.log" 2>&1 &
  WRK=$!
  for i in $(seq 1 100); do curl -fsS -H "$H" $URL/api/admin/workers | grep -q '"gpu-2"' && curl -fsS -H "$H" $URL/api/admin/workers | $PY -c 'import json,sys; sys.exit(0 if any(w["name"]=="gpu-2" and w["status"]=="idle" for w in json.load(sys.stdin)["workers"]) else 1)' && break; sleep 0.3; done
  JOB2='import os, torch; print("uid", os.getuid()); print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-"); x=torch.ones(1024,device="cuda"); print("sum", float(x.sum()))
try:
    open(f"/proc/{os.getppid()}/environ","rb").read(); print("parent environ: readable")
except OSError as e:
    print("parent environ:", type(e).__name__)'
  BODY2=$($PY -c 'import json,sys; print(json.dumps({"config":{"command":[sys.argv[2],"-c",sys.argv[1]]},"gpu_count":1,"worker_labels":{"where":"runas"}}))' "$JOB2" "$(command -v $PY)")
  J2=$(curl -sS -X POST $URL/api/queue/submit -H "$H" -H 'Content-Type: application/json' -d "$BODY2" | $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  for i in $(seq 1 120); do st=$(curl -fsS -H "$H" $URL/api/queue/$J2 | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"])'); case $st in completed|failed|cancelled) break;; esac; sleep 0.5; done
  echo "run-as job $J2: $st"
  curl -fsS -H "$H" "$URL/api/queue/$J2/logs" > "$OUT/joblogs2.json"; head -c 2000 "$OUT/joblogs2.json"; echo
  tail -3 "$OUT/worker2.log"
fi
kill $WRK; sleep 1; kill $SRV; wait
tail -5 "$OUT/worker.log"
