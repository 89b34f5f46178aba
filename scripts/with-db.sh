#!/usr/bin/env bash
# Runs a command with a PostgreSQL database of its own, dropped when it ends:
#
#   scripts/with-db.sh LABEL COMMAND...
#
# creates paritysync_LABEL_<random> on the server at PARITYSYNC_ADMIN_DATABASE_URL
# (default: the local PostgreSQL, user postgres), exports its URL as
# PARITYSYNC_DATABASE_URL and PARITYSYNC_TEST_DATABASE_URL (tests make a schema of
# their own in it), runs COMMAND and drops the database whatever COMMAND did.
set -euo pipefail
label=${1:?usage: $0 LABEL COMMAND...}; shift
admin=${PARITYSYNC_ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
command -v psql >/dev/null || { echo "error: psql not found (the PostgreSQL client creates the run's database)" >&2; exit 1; }
psql "$admin" -qAtc 'SELECT 1' >/dev/null || { echo "error: no PostgreSQL at ${admin%%\?*} (set PARITYSYNC_ADMIN_DATABASE_URL)" >&2; exit 1; }

db="paritysync_${label}_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
cleanup() { psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || echo "warning: could not drop database $db" >&2; }
trap cleanup EXIT

# The admin URL with the run's database in place of its own.
base=${admin%%\?*}; query=${admin#"$base"}
url="${base%/*}/$db$query"
export PARITYSYNC_DATABASE_URL=$url PARITYSYNC_TEST_DATABASE_URL=$url
"$@"
