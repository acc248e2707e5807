#!/bin/bash
# Instructions per API read, counted by callgrind: the list page (30 of FILL) and one message,
# each R requests (default 300) on one keep-alive connection after 50 unmeasured. The same count
# whatever else the machine does, so two builds compare exactly where wrk's req/s move with the
# machine's load (docs/performance.md). Every thread of the server counts.
#
#   bench/read_instructions.sh PYTHON [PYTHONPATH]   e.g.  bench/read_instructions.sh .venv/bin/python src
#
# PYTHON runs `-P -m inboxd serve` as in bench/instructions.sh (a build `bench compare` keeps in
# ~/.cache/inboxd-bench/COMMIT/bin/python with PYTHONPATH empty, or the working tree's with
# PYTHONPATH=src), request limits lifted and the log at warning as `bench compare`'s reads run.
# FILL messages (default 1,000) are sent before the count. Needs valgrind and smtp-source.
set -euo pipefail
PY=$1
PP=${2:-}
R=${R:-300}
FILL=${FILL:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d /tmp/inboxd-read-instructions-XXXXXX)
# shellcheck source=bench/callgrind_server.sh
source "$ROOT/bench/callgrind_server.sh"
"$SOURCE" -d -s 8 -m "$FILL" -F "$D/msg.eml" -f a@example.test -t box@inboxd.localhost "127.0.0.1:$INBOXD_SMTP_PORT"
sleep 5
LIST="/api/accounts/$BOX/messages"
ONE="$LIST/$(curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$INBOXD_HTTP_PORT$LIST" | python3 -c 'import json, sys; print(json.load(sys.stdin)["messages"][0]["id"])')"
# GETs of one path on one connection: N unmeasured, then R with the count switched on.
gets() {
  python3 - "$1" "$2" "$3" "$4" <<PY
import http.client, subprocess, sys
path, warm, count, server = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
conn = http.client.HTTPConnection("127.0.0.1", $INBOXD_HTTP_PORT, timeout=120)
def get():
    conn.request("GET", path, headers={"Authorization": "Bearer $TOKEN"})
    answer = conn.getresponse()
    answer.read()
    assert answer.status == 200, answer.status
for _ in range(warm):
    get()
subprocess.run(["callgrind_control", "-i", "on", server], check=True, capture_output=True)
for _ in range(count):
    get()
subprocess.run(["callgrind_control", "-i", "off", server], check=True, capture_output=True)
PY
}
count() {
  callgrind_control -d "$SERVER" > /dev/null 2>&1
  local total
  total=$(for f in "$D"/cg.out*; do callgrind_annotate "$f" 2> /dev/null | awk '/PROGRAM TOTALS/ && !seen {gsub(",", "", $1); print $1; seen = 1}'; done | awk '{s += $1} END {print s}')
  echo "$total"
}
gets "$LIST" 50 "$R" "$SERVER"
AFTER_LIST=$(count)
rm -f "$D"/cg.out*
callgrind_control -z "$SERVER" > /dev/null 2>&1
gets "$ONE" 50 "$R" "$SERVER"
AFTER_ONE=$(count)
echo "instructions per request: list page (30 of $FILL) $((AFTER_LIST / R)), one message $((AFTER_ONE / R))   ($R requests each; $PY, PYTHONPATH=$PP)"
