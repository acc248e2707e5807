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
# shellcheck source=bench/callgrind_server.sh
source "$ROOT/bench/callgrind_server.sh"
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
