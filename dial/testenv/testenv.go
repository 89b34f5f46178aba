// Package testenv decides what a test does when a service it needs (Redis,
// PostgreSQL, redis-server, the Temporal CLI) is missing: `make test` sets
// PARITYSYNC_TEST_REQUIRE=1 and the test fails naming the service, so a run without
// it cannot pass having skipped; without the switch the test skips with the reason,
// so a developer without the service can still run `go test -short ./...`.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// RequireEnv is the switch: any value other than "" and "0" makes a missing service
// a failure.
const RequireEnv = "PARITYSYNC_TEST_REQUIRE"

// Required reports whether the switch is set.
func Required() bool {
	v := os.Getenv(RequireEnv)
	return v != "" && v != "0"
}

// Unavailable ends tb because service is missing: a failure under the switch, a
// skip otherwise. service names it and how to point the test at it, e.g.
// "Redis at 127.0.0.1:6379 not reachable (REDIS_URL)"; err is the cause.
func Unavailable(tb testing.TB, service string, err error) {
	tb.Helper()
	msg := service
	if err != nil {
		msg = fmt.Sprintf("%s: %v", service, err)
	}
	if Required() {
		tb.Fatalf("%s (%s is set: a missing service fails the run)", msg, RequireEnv)
	}
	tb.Skipf("%s (set %s=1 to make this a failure)", msg, RequireEnv)
}
