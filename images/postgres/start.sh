#!/bin/sh
# Start PostgreSQL as the postgres user; make the cluster first when there is none.
# Extra arguments are passed to the server (e.g. -c max_connections=400).
set -eu
PGDATA=/var/lib/postgresql/data
BIN=/usr/local/lib/pgbin
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    "$BIN/initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
    # Only what the test network needs: the socket, loopback, and the attached subnets.
    cat >"$PGDATA/pg_hba.conf" <<'HBA'
local all all               trust
host  all all 127.0.0.1/32  trust
host  all all samenet       trust
HBA
fi
# fsync off: the tests restart the server and kill clients, never the machine.
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' -c port=5432 \
    -c unix_socket_directories=/tmp -c fsync=off \
    -c full_page_writes=off -c jit=off -c max_connections=300 "$@"
