# shellcheck shell=bash
# A throwaway PostgreSQL cluster for the tests. Source it (after engine.sh), then call:
#
#   ensure_postgres_server   Debian's `postgresql` is installed (apt-get when missing, as
#                            root) and its server binaries are found.
#   start_test_postgres      initdb in a new temporary directory as the unprivileged
#                            `postgres` user, start it listening on 127.0.0.1 (a free port)
#                            and a unix socket in that directory only, and export
#                            AGENTS_RUNNER_TEST_POSTGRES_URL (trust auth, user postgres).
#   stop_test_postgres       stop it and remove its directory (safe to call twice).
#
# Each returns non-zero with a message on stderr saying what failed; none exits the shell.

_pg_say() { printf '%s\n' "postgres: $*" >&2; }

_pg_bindir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$dir" ] && [ -x "$dir/initdb" ] && printf '%s\n' "$dir"
}

ensure_postgres_server() {
    if [ -z "$(_pg_bindir)" ]; then
        _ar_apt_install postgresql || return 1
    fi
    if [ -z "$(_pg_bindir)" ]; then
        _pg_say "postgresql is installed but no initdb was found under /usr/lib/postgresql/*/bin"
        return 1
    fi
    if ! id postgres >/dev/null 2>&1; then
        _pg_say "the postgres user is missing (Debian's postgresql-common creates it);" \
            "reinstall postgresql-common"
        return 1
    fi
}

_pg_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_test_postgres() {
    local bindir port
    bindir=$(_pg_bindir) || { _pg_say "no PostgreSQL server binaries"; return 1; }
    _AR_PG_DIR=$(mktemp -d /tmp/agents-runner-pg.XXXXXX) || return 1
    chown postgres:postgres "$_AR_PG_DIR"
    chmod 700 "$_AR_PG_DIR"
    # initdb refuses root: the cluster belongs to the unprivileged postgres user.
    # From the cluster's own directory: the postgres user may not enter the caller's.
    if ! (cd "$_AR_PG_DIR" && runuser -u postgres -- "$bindir/initdb" -D "$_AR_PG_DIR/data" -U postgres \
        --auth=trust -E UTF8 --no-sync >"$_AR_PG_DIR/initdb.log" 2>&1); then
        _pg_say "initdb failed; its output:"
        cat "$_AR_PG_DIR/initdb.log" >&2
        return 1
    fi
    port=$(_pg_free_port) || { _pg_say "cannot find a free port on 127.0.0.1"; return 1; }
    # fsync off: the tests kill processes, never the machine; it keeps them quick.
    if ! (cd "$_AR_PG_DIR" && runuser -u postgres -- "$bindir/pg_ctl" -D "$_AR_PG_DIR/data" -l "$_AR_PG_DIR/server.log" \
        -w -t 60 -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$_AR_PG_DIR -c fsync=off -c max_connections=300" \
        start >/dev/null); then
        _pg_say "the server did not start; its log:"
        cat "$_AR_PG_DIR/server.log" >&2
        return 1
    fi
    export AGENTS_RUNNER_TEST_POSTGRES_URL="postgresql://postgres@127.0.0.1:$port/postgres"
    export AGENTS_RUNNER_TEST_POSTGRES_DIR="$_AR_PG_DIR"
    _pg_say "test cluster up at $AGENTS_RUNNER_TEST_POSTGRES_URL (data in $_AR_PG_DIR)"
}

stop_test_postgres() {
    local bindir
    [ -n "${_AR_PG_DIR:-}" ] && [ -d "$_AR_PG_DIR" ] || return 0
    bindir=$(_pg_bindir)
    if [ -n "$bindir" ] && [ -f "$_AR_PG_DIR/data/postmaster.pid" ]; then
        (cd "$_AR_PG_DIR" && runuser -u postgres -- "$bindir/pg_ctl" -D "$_AR_PG_DIR/data" -m fast -w stop >/dev/null 2>&1) \
            || _pg_say "pg_ctl stop failed; removing $_AR_PG_DIR anyway"
    fi
    rm -rf "$_AR_PG_DIR"
    _AR_PG_DIR=
}
