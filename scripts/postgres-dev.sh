#!/usr/bin/env bash
# A private PostgreSQL 15 + pgvector server on loopback, for tests, benchmarks and trying
# `store = "postgres://…"` on one machine. Debian bookworm, run as root.
#
#   scripts/postgres-dev.sh start   # install if needed, start (idempotent), print the URL
#   scripts/postgres-dev.sh stop    # stop the server (data is kept)
#   scripts/postgres-dev.sh url     # print the URL only
#   scripts/postgres-dev.sh status  # exit 0 when running
#
# Bookworm ships PostgreSQL 15 but no pgvector, so pgvector is built from the Debian *source*
# package of trixie, fetched through a private apt configuration (the system's apt sources and
# lists are not touched), then `make && make install` against PostgreSQL 15's pg_config.
#
# The cluster lives in $BIB_PG_DIR (default /var/lib/bib-postgres), owned by user postgres,
# listening on 127.0.0.1:$BIB_PG_PORT (default 55432) only; its unix socket is in
# $BIB_PG_DIR/run. A role and database `bib` (password `bib`) with the `vector` extension are
# created for the tests. Settings via environment: BIB_PG_DIR, BIB_PG_PORT, BIB_PG_USER,
# BIB_PG_PASSWORD, BIB_PG_DB.
set -euo pipefail

PG_MAJOR=15
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=$PG_BIN/pg_config
BASE=${BIB_PG_DIR:-/var/lib/bib-postgres}
PORT=${BIB_PG_PORT:-55432}
DB_USER=${BIB_PG_USER:-bib}
DB_PASSWORD=${BIB_PG_PASSWORD:-bib}
DB_NAME=${BIB_PG_DB:-bib}
DATA=$BASE/data
RUN=$BASE/run
LOG=$BASE/postgres.log
# The Debian archive this machine already installs from (its apt sources), unless overridden.
system_debian_mirror() {
    local uri
    uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        awk '{print $2}' | grep -v -- '-security' | grep '/debian$' | head -n1)
    if [ -z "$uri" ]; then
        uri=$(grep -hs '^deb ' /etc/apt/sources.list 2>/dev/null |
            awk '{print $2}' | grep -v -- '-security' | grep '/debian/\?$' | head -n1)
    fi
    echo "${uri%/}"
}
DEB_MIRROR=${BIB_DEBIAN_MIRROR:-$(system_debian_mirror)}

log() { echo "postgres-dev: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

url() { echo "postgres://$DB_USER:$DB_PASSWORD@127.0.0.1:$PORT/$DB_NAME"; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and switches to user postgres)"
}

as_postgres() { runuser -u postgres -- "$@"; }

vector_installed() {
    [ -x "$PG_CONFIG" ] && [ -f "$("$PG_CONFIG" --sharedir)/extension/vector.control" ] &&
        [ -f "$("$PG_CONFIG" --pkglibdir)/vector.so" ]
}

install_packages() {
    if [ -x "$PG_BIN/initdb" ] && { vector_installed || {
        [ -f "$("$PG_CONFIG" --includedir-server)/postgres.h" ] &&
            command -v make >/dev/null && command -v cc >/dev/null &&
            command -v dpkg-source >/dev/null
    }; }; then
        return
    fi
    log "installing PostgreSQL $PG_MAJOR and build tools from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" postgresql-common \
        build-essential dpkg-dev ca-certificates >/dev/null
}

# Build pgvector from the trixie source package with a throw-away apt configuration.
install_pgvector() {
    if vector_installed; then
        return
    fi
    log "building pgvector from the Debian trixie source package"
    local tmp
    tmp=$(mktemp -d /tmp/bib-pgvector.XXXXXX)
    # apt's download sandbox user must be able to write here.
    chmod 755 "$tmp"
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/src" "$tmp/parts"
    [ -n "$DEB_MIRROR" ] || die "no Debian archive found in the apt sources; set BIB_DEBIAN_MIRROR"
    echo "deb-src $DEB_MIRROR trixie main" >"$tmp/sources.list"
    local apt_opts=(
        -o "Dir::Etc::SourceList=$tmp/sources.list"
        -o "Dir::Etc::SourceParts=$tmp/parts"
        -o "Dir::State::Lists=$tmp/lists"
        -o "Dir::Cache=$tmp/cache"
        -o "APT::Sandbox::User=root"
        -o "Acquire::Languages=none"
    )
    apt-get "${apt_opts[@]}" update -qq
    (cd "$tmp/src" && apt-get "${apt_opts[@]}" source -qq pgvector >/dev/null)
    local srcdir
    srcdir=$(find "$tmp/src" -mindepth 1 -maxdepth 1 -type d -name 'pgvector-*' | head -n1)
    [ -n "$srcdir" ] || die "apt-get source pgvector produced no source directory in $tmp/src"
    log "compiling $(basename "$srcdir") against $("$PG_CONFIG" --version)"
    make -s -C "$srcdir" PG_CONFIG="$PG_CONFIG" -j"$(nproc)" >/dev/null
    make -s -C "$srcdir" PG_CONFIG="$PG_CONFIG" install >/dev/null
    rm -rf "$tmp"
    vector_installed || die "pgvector was built but vector.control/vector.so are not installed"
}

running() {
    [ -f "$DATA/PG_VERSION" ] && as_postgres "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

init_cluster() {
    if [ -f "$DATA/PG_VERSION" ]; then
        return
    fi
    log "creating cluster in $DATA"
    mkdir -p "$DATA" "$RUN"
    chown -R postgres:postgres "$BASE"
    chmod 700 "$DATA"
    as_postgres "$PG_BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
        --auth-local=peer --auth-host=scram-sha-256 >/dev/null
    cat >>"$DATA/postgresql.conf" <<EOF

# bibliotecario dev server (scripts/postgres-dev.sh)
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$RUN'
shared_buffers = 256MB
maintenance_work_mem = 512MB
max_connections = 100
fsync = on
EOF
    # Loopback TCP only, password required; peer auth on the private socket for the admin.
    cat >"$DATA/pg_hba.conf" <<EOF
local   all   postgres                 peer
local   all   all                      scram-sha-256
host    all   all      127.0.0.1/32    scram-sha-256
EOF
}

psql_admin() {
    PGOPTIONS="-c client_min_messages=warning" as_postgres "$PG_BIN/psql" -h "$RUN" -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"
}

ensure_db() {
    psql_admin -d postgres <<EOF >/dev/null
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$DB_USER') THEN
    CREATE ROLE "$DB_USER" LOGIN PASSWORD '$DB_PASSWORD';
  ELSE
    ALTER ROLE "$DB_USER" LOGIN PASSWORD '$DB_PASSWORD';
  END IF;
END \$\$;
EOF
    if [ "$(psql_admin -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]; then
        psql_admin -d postgres -c "CREATE DATABASE \"$DB_NAME\" OWNER \"$DB_USER\""
    fi
    # The extension is created by the superuser so the test role needs no extra rights;
    # template1 gets it too, so databases created later have it.
    psql_admin -d "$DB_NAME" -c "CREATE EXTENSION IF NOT EXISTS vector"
    psql_admin -d template1 -c "CREATE EXTENSION IF NOT EXISTS vector"
}

start() {
    need_root
    install_packages
    install_pgvector
    init_cluster
    mkdir -p "$RUN"
    chown postgres:postgres "$RUN"
    if ! running; then
        log "starting PostgreSQL on 127.0.0.1:$PORT (log: $LOG)"
        touch "$LOG"
        chown postgres:postgres "$LOG"
        as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null ||
            die "PostgreSQL did not start; see $LOG"
    fi
    ensure_db
    url
}

stop() {
    need_root
    if running; then
        as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
        log "stopped"
    else
        log "not running"
    fi
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
url) url ;;
status)
    if running; then
        log "running on 127.0.0.1:$PORT"
    else
        log "not running"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|url|status" >&2
    exit 2
    ;;
esac
