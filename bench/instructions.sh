#!/bin/bash
# Instructions per ingested message, counted by callgrind: the same count whatever else the
# machine does, so two builds compare exactly (docs/performance.md, "Issue 25's ingest target,
# third pass"). Every thread of the server counts (the SQLite writer and the search indexer).
#
#   bench/instructions.sh PYTHON [PYTHONPATH]      e.g.  bench/instructions.sh .venv/bin/python src
#
# PYTHON runs `-P -m inboxd serve` (a build's virtual environment, as `bench compare` keeps them
# in ~/.cache/inboxd-bench/COMMIT/bin/python, with PYTHONPATH empty; or the working tree's, with
# PYTHONPATH=src). N messages (default 1,000) of the bench's 4 KB mail over 32 connections to one
# mailbox, after 200 unmeasured; SETTLE seconds (default 6) more for the indexer. Needs valgrind
# and Postfix's smtp-source; takes about two minutes.
set -euo pipefail
PY=$1
PP=${2:-}
N=${N:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d /tmp/inboxd-instructions-XXXXXX)
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
curl -sf -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"address":"box@inboxd.localhost","password":"secret123"}' \
  "http://127.0.0.1:$INBOXD_HTTP_PORT/api/accounts" > /dev/null
PYTHONPATH=$ROOT python3 -c "
from pathlib import Path
from bench.message import build_message, write_for_smtp_source
write_for_smtp_source(build_message(4096, sender='a@example.test', recipient='box@inboxd.localhost'), Path('$D/msg.eml'))"
SOURCE=$(command -v smtp-source || echo /usr/sbin/smtp-source)
send() { "$SOURCE" -d -s "$1" -m "$2" -F "$D/msg.eml" -f a@example.test -t box@inboxd.localhost "127.0.0.1:$INBOXD_SMTP_PORT"; }
send 8 200
sleep 3
callgrind_control -i on $SERVER > /dev/null
send 32 "$N"
sleep "${SETTLE:-6}"
callgrind_control -i off $SERVER > /dev/null
callgrind_control -d $SERVER > /dev/null
TOTAL=$(callgrind_annotate "$(ls -S "$D"/cg.out* | head -1)" 2> /dev/null | awk '/PROGRAM TOTALS/ && !seen {gsub(",", "", $1); print $1; seen = 1}')
echo "instructions per message: $((TOTAL / N))   ($TOTAL for $N messages; $PY, PYTHONPATH=$PP)"
