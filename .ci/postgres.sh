# A throwaway PostgreSQL server on loopback for the party's PostgreSQL tests (they skip
# without it). Source this file, then `start_test_postgres`: it installs the server with apt
# if there is none (Debian, as root), starts one in a temporary directory and exports what
# the tests read:
#   FEDMCMC_TEST_POSTGRES           a connection string without the password
#   FEDMCMC_TEST_POSTGRES_PASSWORD  the test role's password (random, for this server only)
# `stop_test_postgres` stops it and removes its files.

# Runs a PostgreSQL program as the server's owner: `postgres` when we are root (the server
# refuses to run as root), else ourselves.
_as_pg_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The newest installed server's programs (Debian keeps them out of PATH), or nothing.
_pg_bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true
}

start_test_postgres() {
    local started=$SECONDS bin port password
    bin=$(_pg_bin)
    if [ ! -x "$bin/initdb" ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
        bin=$(_pg_bin)
    fi
    FEDMCMC_TEST_PG_DIR=$(mktemp -d /tmp/fedmcmc-pg.XXXXXX)
    FEDMCMC_TEST_PG_CTL="$bin/pg_ctl"
    [ "$(id -u)" = 0 ] && chown postgres: "$FEDMCMC_TEST_PG_DIR"
    # Local (socket) logins are trusted, for setting up; TCP logins need the password.
    _as_pg_owner "$bin/initdb" -D "$FEDMCMC_TEST_PG_DIR/data" -U postgres -E UTF8 \
        --auth-local=trust --auth-host=scram-sha-256 --no-instructions >/dev/null
    # A few ports, in case one is taken. fsync is off: the data is thrown away.
    for port in 55432 55433 55434 55435 55436; do
        if _as_pg_owner "$FEDMCMC_TEST_PG_CTL" -D "$FEDMCMC_TEST_PG_DIR/data" \
            -l "$FEDMCMC_TEST_PG_DIR/log" -w -s start -o "-c listen_addresses=127.0.0.1 \
            -c port=$port -c unix_socket_directories=$FEDMCMC_TEST_PG_DIR -c fsync=off"; then
            break
        fi
        port=
    done
    if [ -z "$port" ]; then
        cat "$FEDMCMC_TEST_PG_DIR/log" >&2
        echo "could not start PostgreSQL" >&2
        return 1
    fi
    password=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
    _as_pg_owner "$bin/psql" -h "$FEDMCMC_TEST_PG_DIR" -p "$port" -U postgres -d postgres \
        -q -v ON_ERROR_STOP=1 \
        -c "CREATE ROLE fedmcmc_test LOGIN PASSWORD '$password'" \
        -c "CREATE DATABASE fedmcmc_test OWNER fedmcmc_test"
    export FEDMCMC_TEST_POSTGRES="host=127.0.0.1 port=$port user=fedmcmc_test dbname=fedmcmc_test"
    export FEDMCMC_TEST_POSTGRES_PASSWORD=$password
    echo "PostgreSQL for the tests on 127.0.0.1:$port ($((SECONDS - started)) s to install and start)"
}

stop_test_postgres() {
    [ -n "${FEDMCMC_TEST_PG_DIR:-}" ] || return 0
    _as_pg_owner "$FEDMCMC_TEST_PG_CTL" -D "$FEDMCMC_TEST_PG_DIR/data" -m fast -s stop || true
    rm -rf "$FEDMCMC_TEST_PG_DIR"
    FEDMCMC_TEST_PG_DIR=
}
