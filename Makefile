# paritysync — everything a user runs goes through these targets.
SHELL := /usr/bin/env bash
# BIN=/elsewhere keeps the binaries out of a shared .bin (the Temporal CLI must be there too).
BIN := $(CURDIR)/.bin
TEMPORAL_CLI_VERSION := v1.5.1
# The server the CLI embeds, for the production topology (make test-prod).
TEMPORAL_SERVER_VERSION := v1.29.1
WORKFLOWCHECK_VERSION := v0.6.0
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: all build demo up down test test-unit test-prod test-hostile record-histories vet fmt-check workflowcheck xmllint promtool lint-openapi bench bench-e2e bench-intake measure-memory clean

all: build

$(BIN)/temporal:
	@echo "building the Temporal CLI $(TEMPORAL_CLI_VERSION) into .bin/ (several minutes the first time)"
	GOBIN=$(BIN) go install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

# The real Temporal server and its SQL tool (schema setup), cached like the CLI.
$(BIN)/server:
	@echo "building the Temporal server $(TEMPORAL_SERVER_VERSION) into .bin/ (several minutes the first time)"
	GOBIN=$(BIN) go install go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION)

$(BIN)/sql:
	GOBIN=$(BIN) go install go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION)

# promtool checks the Prometheus config, rules and alert tests (worker/app/compose_test.go);
# Debian's prometheus package carries it.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
promtool:
	@command -v promtool >/dev/null || { echo "installing promtool (apt package prometheus)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq prometheus >/dev/null; }

$(BIN)/workflowcheck:
	GOBIN=$(BIN) go install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

build: $(BIN)/temporal
	go build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/ ./worker ./starter ./otasim ./intake

demo: build
	PARITYSYNC_BIN=$(BIN) scripts/stack.sh demo

up: build
	PARITYSYNC_BIN=$(BIN) scripts/stack.sh up

down:
	PARITYSYNC_BIN=$(BIN) scripts/stack.sh down

# intake's load benchmark: 50 PMS clients posting webhook changes for 2 minutes
# against a stack of its own (dev server, simulator, worker, intake, a throwaway
# database, its own ports and Redis prefix); reports latency, throughput, 429s with
# Retry-After and lost changes (must be 0). LOADGEN_FLAGS=-duration=10s for a smoke run.
LOADGEN_FLAGS ?=
bench-intake: build
	go build -o $(BIN)/ ./intake/loadgen
	PARITYSYNC_BIN=$(BIN) scripts/stack.sh bench-intake $(LOADGEN_FLAGS)

fmt-check:
	@out=$$(gofmt -l . | grep -v '^\.bin/' || true); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The production-topology tests (make test-prod) are vetted too.
vet:
	go vet ./...
	go vet -tags prod ./e2e

workflowcheck: $(BIN)/workflowcheck
	$(BIN)/workflowcheck ./...

# Every test: unit, fuzz seed corpora, workflow tests, the limiter and activities
# against the real Redis, the store against the local PostgreSQL (a database of
# this run's own, dropped at the end; each test makes a schema in it), and the
# end-to-end runs on a real Temporal dev server (one per package, started by its
# TestMain). PARITYSYNC_TEST_REQUIRE=1: a missing Redis, PostgreSQL, redis-server or
# Temporal CLI fails the run naming the service instead of skipping the tests that
# need it (plain `go test -short ./...` skips them and says why).
# The opt-in measurements (make bench-e2e, LIMITER_SOAK) are left out by -skip rather
# than reported as skipped: under the switch a skip means something is missing.
# -parallel 8: the end-to-end tests mostly wait on channel windows, so more of them
# share the package's dev server than the 2 cores would allow by default.
# The OpenTravel schema tests (channels/) validate with xmllint, from Debian's libxml2-utils.
xmllint:
	@command -v xmllint >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libxml2-utils; }

# intake/openapi.yaml through Redocly's linter (recommended rules, warnings as
# errors; intake/redocly.yaml): npx fetches the pinned CLI from the npm registry
# once and caches it.
lint-openapi:
	scripts/lint-openapi.sh

OPT_IN_TESTS := ^(TestBenchPushEngine|TestSoak|TestRedisMemoryAfterALargeBatch|TestRedisMemoryFullStack)$$
test: $(BIN)/temporal promtool xmllint fmt-check vet workflowcheck lint-openapi
	scripts/with-db.sh test env PARITYSYNC_TEST_REQUIRE=1 TEMPORAL_CLI=$(BIN)/temporal go test -race -count=1 -parallel 8 -timeout 30m -skip '$(OPT_IN_TESTS)' ./...

# Everything but the end-to-end runs (-short: no dev server, no minute-long real-time
# runs); Redis and PostgreSQL are still required.
test-unit: xmllint
	scripts/with-db.sh unit env PARITYSYNC_TEST_REQUIRE=1 go test -short -race -count=1 -p 8 -timeout 10m -skip '$(OPT_IN_TESTS)' ./...

# The hostile-channel scenarios in one run (garbage 200s, a skewed clock with dated
# Retry-After, late applies, workers that disagree), with a figure for each.
test-hostile: $(BIN)/temporal xmllint
	scripts/with-db.sh hostile env PARITYSYNC_TEST_REQUIRE=1 TEMPORAL_CLI=$(BIN)/temporal go test -race -count=1 -timeout 15m -run '^TestHostileChannel$$' -v ./e2e

# Re-records the histories the replay test (workflows/replay_test.go) replays, from
# the system tests' runs on a dev server (e2e/), then replays them; run it after a
# deliberate change to a workflow and commit workflows/testdata.
record-histories: $(BIN)/temporal
	scripts/with-db.sh record env PARITYSYNC_TEST_REQUIRE=1 PARITYSYNC_RECORD_HISTORY=1 TEMPORAL_CLI=$(BIN)/temporal \
		go test -count=1 -parallel 8 -run '^(TestEndToEnd|TestBatchLifecycle|TestWorkflowPaths|TestChannelSyncContinuesAsNew|TestSmootherHoldsReferencesAtItsAdmissionLimit)$$' ./e2e
	scripts/with-db.sh record env PARITYSYNC_TEST_REQUIRE=1 PARITYSYNC_RECORD_HISTORY=1 TEMPORAL_CLI=$(BIN)/temporal \
		go test -count=1 -run '^TestCompletionCallbackIsSignedDeliveredOnceAndRetriedWithTheSameEventID$$' ./intake
	go test -count=1 -run TestReplay ./workflows

bench:
	go test -run '^$$' -bench . -benchmem ./models ./limiter

# The push engine's end-to-end scenarios on a real dev server, Redis and the
# simulator (about 30 minutes); prints one table. BENCH=urgent,race runs a subset.
BENCH ?= all
bench-e2e: $(BIN)/temporal
	mkdir -p .run
	scripts/with-db.sh bench env PARITYSYNC_BENCH=$(BENCH) PARITYSYNC_BENCH_OUT=$(CURDIR)/.run/bench-e2e.md \
		TEMPORAL_CLI=$(BIN)/temporal go test -count=1 -run TestBenchPushEngine -v -timeout 90m ./e2e

# Redis memory of the full stack (dev server, simulator, worker, a key prefix of its
# own) before and after a batch over a year of nights, once its leases and
# reservations expired: at most 2 MB more. MUTATIONS=100000 for a larger batch.
MUTATIONS ?= 50000
measure-memory: $(BIN)/temporal
	scripts/with-db.sh memory env PARITYSYNC_TEST_REQUIRE=1 PARITYSYNC_MEASURE_MEMORY=$(MUTATIONS) \
		TEMPORAL_CLI=$(BIN)/temporal go test -count=1 -run '^TestRedisMemoryFullStack$$' -v -timeout 30m ./e2e

# The production topology on loopback, without Docker: the Temporal server on
# PostgreSQL (databases of the run's own), a Redis Cluster of 3 masters and 3
# replicas, the simulator and worker processes; workers killed, a Redis master
# failover, a server restart and the throughput scenarios (see the README, "Running
# at scale"). PROD=kill,failover,restart,throughput runs a subset. The kill runs go
# PARITYSYNC_PROD_PARALLEL (4) at a time and the throughput runs side by side:
# -parallel lets them.
PROD ?= all
test-prod: $(BIN)/temporal $(BIN)/server $(BIN)/sql
	mkdir -p .run
	scripts/with-db.sh prod env PARITYSYNC_PROD=$(PROD) PARITYSYNC_PROD_OUT=$(CURDIR)/.run/test-prod.md \
		TEMPORAL_CLI=$(BIN)/temporal TEMPORAL_SERVER=$(BIN)/server TEMPORAL_SQL_TOOL=$(BIN)/sql \
		go test -tags prod -count=1 -parallel 8 -run TestProd -v -timeout 80m ./e2e

clean: down
	rm -rf $(BIN) .run
