#!/bin/sh
# The container's entrypoint: check the data directory, then run `inboxd <args>` as PID 1
# (so SIGTERM from `docker stop` reaches it and it stops in order).
set -eu
data="${INBOXD_DATA_DIR:-/data}"
mkdir -p "$data"
if [ ! -w "$data" ]; then
    echo "inboxd: $data is not writable by uid $(id -u); give the volume to that user" >&2
    exit 1
fi
if [ "$#" -eq 0 ]; then
    set -- serve
fi
exec inboxd "$@"
