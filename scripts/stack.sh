#!/usr/bin/env bash
# Runs paritysync locally without Docker: a Temporal dev server (UI on 8233), Redis
# (the one at REDIS_URL, or a local redis-server when none answers), a database of
# its own on the local PostgreSQL (paritysync_stack, dropped by `down`), the channel
# simulator, a worker and intake (the PMS-facing HTTP API).
#
#   scripts/stack.sh up      start the stack and leave it running (make up); writes
#                            .run/env, the environment a second shell sources for the starter
#   scripts/stack.sh down    stop what `up` started (make down)
#   scripts/stack.sh env     write and print .run/env again, without starting anything
#   scripts/stack.sh demo    start, send a sample batch through intake, print the summary, stop (make demo)
#   scripts/stack.sh bench-intake [loadgen flags]
#                            start a stack of its own (own ports, database and Redis
#                            prefix), run intake's load benchmark against it, stop (make bench-intake)
set -euo pipefail
cd "$(dirname "$0")/.."

# PARITYSYNC_BIN: where make put the binaries (and the Temporal CLI).
BIN=${PARITYSYNC_BIN:-.bin}
# PARITYSYNC_RUN_DIR: where the stack keeps its state, logs and secrets [.run].
RUN=${PARITYSYNC_RUN_DIR:-.run}
if [ "${1:-}" = bench-intake ]; then
  # The benchmark's stack is its own: other ports, state under .run/bench, a fresh
  # dev server, a throwaway database and a Redis key prefix of its own, so it runs
  # beside a 'make up' stack and leaves nothing behind.
  RUN=.run/bench
  bench_id=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  export TEMPORAL_ADDRESS=${BENCH_TEMPORAL_ADDRESS:-127.0.0.1:17233}
  export TEMPORAL_UI_URL=${BENCH_TEMPORAL_UI_URL:-http://127.0.0.1:18233}
  export PARITYSYNC_CHANNEL_URL=${BENCH_CHANNEL_URL:-http://127.0.0.1:18090}
  export PARITYSYNC_METRICS_ADDR=${BENCH_METRICS_ADDR:-127.0.0.1:19464}
  export PARITYSYNC_INTAKE_ADDR=${BENCH_INTAKE_ADDR:-127.0.0.1:18080}
  export PARITYSYNC_STACK_DATABASE=paritysync_bench_$bench_id
  unset PARITYSYNC_DATABASE_URL
  export PARITYSYNC_KEY_PREFIX=paritysync-bench-$bench_id:
  # Small enough that 50 clients fill the smoothers within seconds, so the run
  # measures admission control (429 + Retry-After) as well as throughput.
  export PARITYSYNC_SMOOTHER_MAX_PENDING=${PARITYSYNC_SMOOTHER_MAX_PENDING:-300}
fi
mkdir -p "$RUN"

export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export TEMPORAL_ADDRESS=${TEMPORAL_ADDRESS:-127.0.0.1:7233}
export TEMPORAL_UI_URL=${TEMPORAL_UI_URL:-http://127.0.0.1:8233}
export PARITYSYNC_CHANNEL_URL=${PARITYSYNC_CHANNEL_URL:-http://127.0.0.1:8090}
export PARITYSYNC_METRICS_ADDR=${PARITYSYNC_METRICS_ADDR:-127.0.0.1:9464}
# The system of record: the stack's own database on the server at
# PARITYSYNC_ADMIN_DATABASE_URL; the worker applies the migrations at start.
PG_ADMIN_URL=${PARITYSYNC_ADMIN_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
STACK_DB=${PARITYSYNC_STACK_DATABASE:-paritysync_stack}
pg_base=${PG_ADMIN_URL%%\?*}
export PARITYSYNC_DATABASE_URL=${PARITYSYNC_DATABASE_URL:-${pg_base%/*}/$STACK_DB${PG_ADMIN_URL#"$pg_base"}}
SIM_ADDR=${PARITYSYNC_CHANNEL_URL#http://}
DEMO_MUTATIONS=${DEMO_MUTATIONS:-2000}
# The simulator and the worker share a demo credential through a file the worker
# re-reads when it changes; it never appears on a command line or in a log.
TOKEN_FILE=$RUN/token
secret() { echo "demo-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"; }
[ -s "$TOKEN_FILE" ] || { umask 077; secret > "$TOKEN_FILE"; }
export PARITYSYNC_TOKEN_FILE=$TOKEN_FILE
# The demo's Channex and OpenTravel channels (deploy/channels.demo.yaml) each have
# their own secret: a Channex API key, and user:password for OpenTravel's Basic auth.
CHANNEX_KEY_FILE=$RUN/channex.key
OTA_SECRET_FILE=$RUN/ota.secret
[ -s "$CHANNEX_KEY_FILE" ] || { umask 077; secret > "$CHANNEX_KEY_FILE"; }
[ -s "$OTA_SECRET_FILE" ] || { umask 077; echo "demo-hotel:$(secret)" > "$OTA_SECRET_FILE"; }
export PARITYSYNC_CHANNELS_FILE=${PARITYSYNC_CHANNELS_FILE:-deploy/channels.demo.yaml}
export PARITYSYNC_CHANNEL_CHANNEX_DEMO_CREDENTIALS_FILE=$CHANNEX_KEY_FILE
export PARITYSYNC_CHANNEL_OTA_DEMO_CREDENTIALS_FILE=$OTA_SECRET_FILE
DEMO_CHANNELS=booking_com,expedia,agoda,channex_demo,ota_demo
# intake's demo tenant (an operator key: role admin): the key in api.key, its SHA-256 in the keys file intake
# reads, and an Authorization header file for curl (-H @file), so the key is never
# on a command line or in a log.
export PARITYSYNC_INTAKE_ADDR=${PARITYSYNC_INTAKE_ADDR:-127.0.0.1:8080}
INTAKE_URL=http://$PARITYSYNC_INTAKE_ADDR
API_KEY_FILE=$RUN/api.key
API_AUTH_FILE=$RUN/api.auth
export PARITYSYNC_API_KEYS_FILE=$RUN/api-keys
if [ ! -s "$API_KEY_FILE" ] || [ ! -s "$PARITYSYNC_API_KEYS_FILE" ] || [ ! -s "$API_AUTH_FILE" ]; then
  umask 077
  printf '%s' "$(secret)" > "$API_KEY_FILE"
  echo "demo:$(sha256sum < "$API_KEY_FILE" | cut -d' ' -f1):admin" > "$PARITYSYNC_API_KEYS_FILE"
  printf 'Authorization: Bearer %s\n' "$(cat "$API_KEY_FILE")" > "$API_AUTH_FILE"
fi

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# wait_for NAME SECONDS COMMAND... retries COMMAND until it succeeds.
wait_for() {
  local name=$1 secs=$2; shift 2
  for _ in $(seq $((secs * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "$name did not come up in ${secs}s (logs in $RUN/)"
}

# start NAME COMMAND... runs COMMAND in the background, logging to .run/NAME.log.
start() {
  local name=$1; shift
  "$@" >"$RUN/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
}

redis_hostport() {
  local rest=${REDIS_URL#*://}; rest=${rest#*@}; rest=${rest%%/*}
  echo "${rest:-127.0.0.1:6379}"
}

redis_up() { redis-cli -u "$REDIS_URL" ping 2>/dev/null | grep -q PONG; }

pg_up() { psql "$PG_ADMIN_URL" -qAtc 'SELECT 1' >/dev/null 2>&1; }

temporal_up() { "$BIN/temporal" operator cluster health --address "$TEMPORAL_ADDRESS" 2>/dev/null | grep -q SERVING; }

up() {
  [ -x "$BIN/temporal" ] && [ -x "$BIN/worker" ] || die "run 'make build' first (make demo/up do it for you)"

  if redis_up; then
    say "Redis answers at $(redis_hostport)"
  else
    command -v redis-server >/dev/null || die "no Redis at $REDIS_URL and no redis-server to start"
    local hp; hp=$(redis_hostport)
    say "starting redis-server on ${hp##*:}"
    start redis redis-server --bind 127.0.0.1 --port "${hp##*:}" --save "" --appendonly no
    wait_for Redis 10 redis_up
  fi

  command -v psql >/dev/null || die "psql not found: the PostgreSQL client creates the stack's database"
  pg_up || die "no PostgreSQL at ${PG_ADMIN_URL%%\?*} (set PARITYSYNC_ADMIN_DATABASE_URL)"
  if [ "$(psql "$PG_ADMIN_URL" -qAtc "SELECT 1 FROM pg_database WHERE datname = '$STACK_DB'")" != 1 ]; then
    psql "$PG_ADMIN_URL" -qc "CREATE DATABASE $STACK_DB" >/dev/null
  fi
  say "PostgreSQL database $STACK_DB (the system of record)"

  if temporal_up; then
    say "Temporal answers at $TEMPORAL_ADDRESS (reusing it)"
  else
    say "starting the Temporal dev server at $TEMPORAL_ADDRESS, UI at $TEMPORAL_UI_URL"
    # The new matcher with one partition makes task priority strict (DESIGN.md).
    start temporal "$BIN/temporal" server start-dev \
      --ip "${TEMPORAL_ADDRESS%%:*}" --port "${TEMPORAL_ADDRESS##*:}" --ui-port "${TEMPORAL_UI_URL##*:}" \
      --db-filename "$RUN/temporal.db" --log-level error \
      --search-attribute Channel=Keyword --search-attribute BatchID=Keyword --search-attribute Priority=Int \
      --dynamic-config-value matching.useNewMatcher=true \
      --dynamic-config-value matching.numTaskqueueReadPartitions=1 \
      --dynamic-config-value matching.numTaskqueueWritePartitions=1
    wait_for "Temporal dev server" 60 temporal_up
  fi

  say "starting the channel simulator at $PARITYSYNC_CHANNEL_URL"
  OTASIM_STATIC_TOKENS="$(cat "$TOKEN_FILE"),$(cat "$CHANNEX_KEY_FILE"),$(cut -d: -f2- "$OTA_SECRET_FILE")" \
    start otasim "$BIN/otasim" -addr "$SIM_ADDR" -config deploy/otasim.demo.yaml
  wait_for simulator 10 curl -fsS "$PARITYSYNC_CHANNEL_URL/stats"

  say "starting the worker (metrics at http://$PARITYSYNC_METRICS_ADDR/metrics)"
  start worker "$BIN/worker"
  wait_for worker 30 curl -fsS "http://$PARITYSYNC_METRICS_ADDR/healthz"

  [ -x "$BIN/intake" ] || die "run 'make build' first: no $BIN/intake"
  say "starting intake, the HTTP API, at $INTAKE_URL (tenant demo, key in $API_KEY_FILE)"
  start intake "$BIN/intake"
  wait_for intake 30 curl -fsS "$INTAKE_URL/readyz"
}

# write_env writes .run/env: what a second shell needs for the starter to reach this
# stack (`source .run/env`), then prints it. It holds paths to secret files, never
# a secret; a database password, if PARITYSYNC_ADMIN_DATABASE_URL has one, is masked
# on the terminal (the file itself is readable by its owner only).
write_env() {
  local env=$RUN/env name abs
  abs=$(cd "$RUN" && pwd)
  (umask 077; {
    echo "# written by 'make up' ($(date -u +%FT%TZ)); 'source $env' in another shell"
    printf 'export PATH=%q:"$PATH"\n' "$(cd "$BIN" && pwd)"
    for name in REDIS_URL PARITYSYNC_DATABASE_URL TEMPORAL_ADDRESS TEMPORAL_NAMESPACE TEMPORAL_UI_URL \
      PARITYSYNC_TASK_QUEUE PARITYSYNC_KEY_PREFIX PARITYSYNC_CHANNEL_URL; do
      [ -n "${!name:-}" ] && printf 'export %s=%q\n' "$name" "${!name}"
    done
    printf 'export PARITYSYNC_CHANNELS_FILE=%q\n' "$(cd "$(dirname "$PARITYSYNC_CHANNELS_FILE")" && pwd)/$(basename "$PARITYSYNC_CHANNELS_FILE")"
    printf 'export PARITYSYNC_TOKEN_FILE=%q\n' "$abs/token"
    printf 'export PARITYSYNC_CHANNEL_CHANNEX_DEMO_CREDENTIALS_FILE=%q\n' "$abs/channex.key"
    printf 'export PARITYSYNC_CHANNEL_OTA_DEMO_CREDENTIALS_FILE=%q\n' "$abs/ota.secret"
  } >"$env")
  say "for a second shell: source $env   (then: starter quota, starter batch start --file … --wait)"
  sed -E 's#(://[^:/@]+):[^@/]*@#\1:xxxxx@#' "$env" | grep '^export'
}

down() {
  local name pid
  rm -f "$RUN/env"
  for name in intake worker otasim temporal redis; do
    [ -f "$RUN/$name.pid" ] || continue
    pid=$(cat "$RUN/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$RUN/$name.pid"
  done
  rm -f "$RUN/temporal.db"
  if command -v psql >/dev/null && pg_up; then
    psql "$PG_ADMIN_URL" -qc "DROP DATABASE IF EXISTS $STACK_DB WITH (FORCE)" >/dev/null || true
  fi
}

sim_stats() {
  local stats; stats=$(curl -fsS "$PARITYSYNC_CHANNEL_URL/stats")
  if command -v jq >/dev/null; then
    printf '%s' "$stats" | jq -r '
      (["channel","requests","accepted","reads","429s","5xx","duplicates","stale","max in 60 s","limit"] | @tsv),
      (to_entries[] | [.key, .value.requests, .value.accepted, .value.reads, .value.throttled, .value.server_errors,
        .value.duplicates, .value.stale_received, .value.max_window_requests, .value.limit] | @tsv)' |
      column -t -s $'\t'
  else
    printf '%s\n' "$stats"
  fi
}

demo() {
  local t0=$SECONDS
  command -v jq >/dev/null || die "jq not found: the demo reads intake's JSON answers with it"
  rm -f "$RUN/temporal.db"
  trap down EXIT
  up
  say "writing a sample batch of $DEMO_MUTATIONS mutations"
  "$BIN/starter" sample --mutations "$DEMO_MUTATIONS" --channels "$DEMO_CHANNELS" --out "$RUN/sample.jsonl"
  say "sending it through intake: POST $INTAKE_URL/v1/batches"
  local ans id state rows
  ans=$(curl -sS -X POST "$INTAKE_URL/v1/batches" -H @"$API_AUTH_FILE" \
    -H 'Content-Type: application/x-ndjson' -H "Idempotency-Key: demo-$(date +%s)" \
    --data-binary @"$RUN/sample.jsonl") || die "intake did not answer; see $RUN/intake.log"
  id=$(printf '%s' "$ans" | jq -r '.batch_id // empty')
  [ -n "$id" ] || die "intake refused the batch: $ans"
  rows=$(printf '%s' "$ans" | jq -r .mutations)
  printf '%s' "$ans" | jq -r '"batch \(.batch_id): \(.mutations) rows, \(.accepted) started, \([.rejected[].index] | unique | length) refused (listed in the answer and at \(.status_url)/rejections)\n\(.ui)"'
  say "following it at GET $INTAKE_URL/v1/batches/$id"
  while :; do
    ans=$(curl -fsS "$INTAKE_URL/v1/batches/$id" -H @"$API_AUTH_FILE") || die "GET /v1/batches/$id failed; see $RUN/intake.log"
    state=$(printf '%s' "$ans" | jq -r .state)
    printf '%s %s\n' "$(date +%T)" "$(printf '%s' "$ans" | jq -r --arg rows "$rows" '.totals | "\(.committed + .superseded + .rejected + .dead_lettered + (.cancelled // 0))/\($rows) have an outcome"')" >&2
    [ "$state" = running ] || break
    sleep 2
  done
  # The same summary as 'starter batch start --wait': the outcomes per channel as
  # the system of record holds them (intake's refused rows included), with the
  # waits and requests the batch itself counted.
  printf '%s' "$ans" | jq -r '
    ((.result.channels // []) | map({(.channel): .}) | add // {}) as $p |
    (.counts | map(. + {deferred: ($p[.channel].deferred // 0), requests: ($p[.channel].requests // 0)})) as $rows |
    (["channel","total","committed","superseded","rejected","dead-lettered","deferred","requests"] | @tsv),
    (($rows + [reduce $rows[] as $r ({channel: "total"}; reduce ($r | to_entries[] | select(.value | type == "number")) as $e (.; .[$e.key] += $e.value))])[] |
      [.channel, .total, .committed, .superseded, .rejected, .dead_lettered, .deferred, .requests] | @tsv)' |
    column -t -s $'\t'
  curl -fsS "$INTAKE_URL/v1/batches/$id/rejections" -H @"$API_AUTH_FILE" |
    jq -r '.outcomes[] | "rejected \(.mutation_id) (\(.channel)): \(.reason)"'
  [ "$state" = done ] || die "batch ended $state; see $RUN/worker.log"
  say "what the simulated channels saw"
  sim_stats
  say "dead-letter queue"
  "$BIN/starter" dlq list --count 5 2>/dev/null | head -n 6
  say "done in $((SECONDS - t0))s; the UI was at $TEMPORAL_UI_URL and intake at $INTAKE_URL (stopped with the stack; 'make up' keeps them running)"
}

# bench_intake runs intake's load benchmark (intake/loadgen) against a stack of its
# own; its arguments go to the load generator (e.g. -duration 10s).
bench_intake() {
  [ -x "$BIN/loadgen" ] || die "run 'make bench-intake': no $BIN/loadgen"
  cleanup_bench() {
    down
    redis-cli -u "$REDIS_URL" --scan --pattern "$PARITYSYNC_KEY_PREFIX*" 2>/dev/null |
      xargs -r -n 500 redis-cli -u "$REDIS_URL" DEL >/dev/null 2>&1 || true
  }
  trap cleanup_bench EXIT
  rm -f "$RUN/temporal.db"
  up
  say "load: $BIN/loadgen -url $INTAKE_URL -key-file $API_KEY_FILE $* (smoother limit $PARITYSYNC_SMOOTHER_MAX_PENDING per channel; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))"
  "$BIN/loadgen" -url "$INTAKE_URL" -key-file "$API_KEY_FILE" "$@"
  say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
}

case "${1:-}" in
  up) up; write_env; say "stack is up: UI $TEMPORAL_UI_URL, simulator $PARITYSYNC_CHANNEL_URL, intake $INTAKE_URL (key in $API_KEY_FILE); 'make down' stops it" ;;
  down) down ;;
  env) write_env ;;
  demo) demo ;;
  bench-intake) shift; bench_intake "$@" ;;
  *) echo "usage: $0 up|down|demo|env|bench-intake [loadgen flags]" >&2; exit 2 ;;
esac
