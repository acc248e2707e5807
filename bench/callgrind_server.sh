# Sourced by bench/instructions.sh and bench/read_instructions.sh: starts `PY -P -m inboxd serve`
# (PYTHONPATH=PP) under callgrind with the count off, request limits lifted and the log at
# warning, in the scratch directory D; waits for /healthz; leaves SERVER (its pid), TOKEN (the
# bootstrap token), BOX (the id of box@inboxd.localhost, made here), INBOXD_HTTP_PORT and
# INBOXD_SMTP_PORT set, SOURCE (smtp-source), and the bench's 4 KB mail to that box in $D/msg.eml. The trap stops the server and removes D (unless KEEP is set).
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export INBOXD_DATA_DIR=$D/data INBOXD_HTTP_HOST=127.0.0.1 INBOXD_HTTP_PORT=$(port) INBOXD_SMTP_HOST=127.0.0.1
export INBOXD_SMTP_PORT=$(port) INBOXD_SUBMISSION_HOST=127.0.0.1 INBOXD_SUBMISSION_PORT=$(port)
export INBOXD_LOG_LEVEL=warning INBOXD_PRO_RPS=1000000 INBOXD_PRO_OPS_LIMIT=1000000000 INBOXD_PRO_CREATE_INTERVAL=0
mkdir -p "$D/data"
PYTHONPATH=$PP valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$D/cg.out" \
  "$PY" -P -m inboxd serve > "$D/log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$D"' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$INBOXD_HTTP_PORT/healthz" > /dev/null 2>&1 && break
  sleep 0.5
done
TOKEN=$(cat "$D/data/bootstrap-token")
BOX=$(curl -sf -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"address":"box@inboxd.localhost","password":"secret123"}' \
  "http://127.0.0.1:$INBOXD_HTTP_PORT/api/accounts" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
PYTHONPATH=$ROOT python3 -c "
from pathlib import Path
from bench.message import build_message, write_for_smtp_source
write_for_smtp_source(build_message(4096, sender='a@example.test', recipient='box@inboxd.localhost'), Path('$D/msg.eml'))"
SOURCE=$(command -v smtp-source || echo /usr/sbin/smtp-source)
