#!/usr/bin/env bash
# `make up`: the orchestrator on SQLite under $DATA, with its embedded local worker
# (--local-gpus auto: every GPU found here, or the CPU). Ctrl-C stops it.
# Quiet: warnings and errors only (LOG_LEVEL=info shows every request too), so the banner,
# printed last, stays on the screen.
set -euo pipefail
PORT=${PORT:-8001}; DATA=${DATA:-.gpufleet}; BIN=${BIN:-.venv/bin}; LOG_LEVEL=${LOG_LEVEL:-warning}
URL="http://127.0.0.1:${PORT}"

"$BIN/gpufleet" server --host 0.0.0.0 --port "$PORT" --data-dir "$DATA" --local-gpus auto \
  --log-level "$LOG_LEVEL" &
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

# Absolute paths: the lines below work pasted into any shell, in any folder.
DATA_ABS=$(cd "$DATA" && pwd); GPUFLEET_ABS="$(cd "$BIN" && pwd)/gpufleet"
CLI="$(printf %q "$GPUFLEET_ABS") workers list --data-dir $(printf %q "$DATA_ABS")"

cat <<MSG

gpufleet is up: orchestrator on $URL, local worker "local" idle.
  Workers reach it at: $PUBLIC (set --public-url / GPUFLEET_PUBLIC_URL to change it)
  Web UI:        $URL (sign in with the admin key)
  Admin key:     $DATA_ABS/admin.token
  CLI:           $CLI
                 (--data-dir, or GPUFLEET_DATA_DIR=$DATA_ABS, gives the CLI the server's address and admin key)
  Submit a job:  curl -s -X POST $URL/api/queue/submit -H "Authorization: Bearer \$(cat $DATA_ABS/admin.token)" \\
                   -H 'Content-Type: application/json' -d '{"config": {"command": ["echo", "hello"]}, "target": "local"}'
Only warnings and errors are logged below (make up LOG_LEVEL=info logs every request).
Press Ctrl-C to stop.
MSG
wait $SERVER
