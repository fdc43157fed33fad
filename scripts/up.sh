#!/usr/bin/env bash
# `make up`: the orchestrator on SQLite under $DATA, with its embedded local worker
# (--local-gpus auto: every GPU found here, or the CPU). Ctrl-C stops it.
set -euo pipefail
PORT=${PORT:-8001}; DATA=${DATA:-.gpufleet}; BIN=${BIN:-.venv/bin}
URL="http://127.0.0.1:${PORT}"

"$BIN/gpufleet" server --host 0.0.0.0 --port "$PORT" --data-dir "$DATA" --local-gpus auto &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT INT TERM

ready() {
  curl -fsS -H "Authorization: Bearer $(cat "$DATA/admin.token" 2>/dev/null)" \
    "$URL/api/admin/workers/w_local" 2>/dev/null | grep -q '"status":"idle"'
}
for _ in $(seq 1 300); do
  ready && break
  kill -0 $SERVER 2>/dev/null || { echo "the orchestrator did not start (see above)"; exit 1; }
  sleep 0.1
done
ready || { echo "the local worker did not come up within 30 s"; exit 1; }

# Where workers on other machines reach it (--public-url; Create Worker pastes it).
PUBLIC=$("$BIN/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["public_url"])' \
  "$DATA/server.json" 2>/dev/null || echo "$URL")

cat <<MSG

gpufleet is up: orchestrator on $URL, local worker "local" idle.
  Workers reach it at: $PUBLIC (set --public-url / GPUFLEET_PUBLIC_URL to change it)
  Admin key:     $DATA/admin.token
  CLI:           $BIN/gpufleet workers list   (run here: it reads $DATA/server.json and admin.token)
  Submit a job:  curl -s -X POST $URL/api/queue/submit -H "Authorization: Bearer \$(cat $DATA/admin.token)" \\
                   -H 'Content-Type: application/json' -d '{"config": {"command": ["echo", "hello"]}, "target": "local"}'
Press Ctrl-C to stop.
MSG
wait $SERVER
