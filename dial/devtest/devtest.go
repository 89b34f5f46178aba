// Package devtest gives a test package one Temporal dev server, started on first
// use and stopped by Main (the package's TestMain), and gives each end-to-end test a
// namespace of its own on it, so tests run side by side (t.Parallel) without seeing
// each other's workflows: workflow ids that are fixed per channel (a channel's
// burst smoother) do not collide, and visibility lists only the test's own runs.
//
// The server runs as the README says every test and deployment runs Temporal: the
// new matcher with one task-queue partition (priority is honoured only so) and
// paritysync's search attributes.
//
//	func TestMain(m *testing.M) { devtest.Main(m) }
//
//	env := devtest.Start(t) // skips under -short
//	... TEMPORAL_ADDRESS=env.FrontendHostPort(), TEMPORAL_NAMESPACE=env.Namespace(), env.Client() ...
package devtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/paritysync/paritysync/dial/testenv"
	"github.com/paritysync/paritysync/models"
)

// ServerFlags are the dynamic-config flags every dev server of the tests runs with:
// Temporal honours temporal.Priority only with the new matcher, and keeps priority
// per task-queue partition, so one partition.
var ServerFlags = []string{
	"--dynamic-config-value", "matching.useNewMatcher=true",
	"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
	"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
}

// SearchAttributes are paritysync's search attributes, registered on every
// namespace of the server.
func SearchAttributes() temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		temporal.NewSearchAttributeKeyKeyword(models.SearchAttrChannel).ValueSet(""),
		temporal.NewSearchAttributeKeyKeyword(models.SearchAttrBatchID).ValueSet(""),
		temporal.NewSearchAttributeKeyInt64(models.SearchAttrPriority).ValueSet(0),
	)
}

// Namespaces is how many namespaces the server creates at launch: one per
// end-to-end test of a package (a test's subtests share its namespace). A package
// with more tests raises it.
var Namespaces = 32

var (
	mu      sync.Mutex
	srv     *testsuite.DevServer
	srvErr  error
	nextNS  atomic.Int32
	started bool
)

// Main runs the package's tests, then stops the dev server if one was started.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if srv != nil {
		_ = srv.Stop()
	}
	mu.Unlock()
	os.Exit(code)
}

// CLI is the Temporal CLI binary: TEMPORAL_CLI, or the repository's .bin/temporal
// (make test builds it there) seen from a package directory.
func CLI() (string, error) {
	path := os.Getenv("TEMPORAL_CLI")
	if path == "" {
		path = filepath.Join("..", ".bin", "temporal")
	}
	if _, err := os.Stat(path); err != nil {
		return path, err
	}
	return path, nil
}

// server is the package's dev server, started by the first caller.
func server(tb testing.TB) *testsuite.DevServer {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !started {
		started = true
		srv, srvErr = startServer()
	}
	if srvErr != nil {
		tb.Fatalf("start Temporal dev server: %v", srvErr)
	}
	return srv
}

func startServer() (*testsuite.DevServer, error) {
	path, err := CLI()
	if err != nil {
		return nil, fmt.Errorf("no Temporal CLI at %s (make test builds it into .bin/; or set TEMPORAL_CLI): %w", path, err)
	}
	args := append([]string(nil), ServerFlags...)
	for i := range Namespaces {
		args = append(args, "--namespace", namespaceName(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:     path,
		ClientOptions:    &client.Options{Logger: quiet{}},
		LogLevel:         "error",
		SearchAttributes: SearchAttributes(),
		ExtraArgs:        args,
	})
}

func namespaceName(i int) string { return fmt.Sprintf("test-%02d", i+1) }

// Env is one test's share of the package's dev server: its frontend and a
// namespace no other test of the package uses.
type Env struct {
	hostPort, namespace string
	client              client.Client
}

// FrontendHostPort is the server's frontend address (TEMPORAL_ADDRESS).
func (e *Env) FrontendHostPort() string { return e.hostPort }

// Namespace is the test's namespace (TEMPORAL_NAMESPACE).
func (e *Env) Namespace() string { return e.namespace }

// Client is a client of the test's namespace, closed when the test ends.
func (e *Env) Client() client.Client { return e.client }

// Start gives the test its namespace on the package's dev server, starting the
// server on first use. Under -short it skips (no dev server); without the Temporal
// CLI it fails under PARITYSYNC_TEST_REQUIRE and skips otherwise.
func Start(tb testing.TB) *Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip("end-to-end: needs a Temporal dev server")
	}
	if path, err := CLI(); err != nil {
		testenv.Unavailable(tb, "Temporal CLI not found at "+path+" (TEMPORAL_CLI; make test builds it into .bin/)", err)
	}
	s := server(tb)
	i := int(nextNS.Add(1)) - 1
	if i >= Namespaces {
		tb.Fatalf("more than %d end-to-end tests in this package share its dev server: raise devtest.Namespaces", Namespaces)
	}
	e := &Env{hostPort: s.FrontendHostPort(), namespace: namespaceName(i)}
	c, err := client.Dial(client.Options{HostPort: e.hostPort, Namespace: e.namespace, Logger: quiet{}})
	if err != nil {
		tb.Fatalf("Temporal client of namespace %s: %v", e.namespace, err)
	}
	e.client = c
	tb.Cleanup(c.Close)
	return e
}

// StartOwn starts a dev server of the test's own, with ServerFlags and extra (a
// dynamic-config value the package's shared server must not have, such as a low
// continue-as-new threshold), and gives the test its default namespace. The server
// stops when the test ends. Like Start, it skips under -short.
func StartOwn(tb testing.TB, extra ...string) *Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip("end-to-end: needs a Temporal dev server")
	}
	path, err := CLI()
	if err != nil {
		testenv.Unavailable(tb, "Temporal CLI not found at "+path+" (TEMPORAL_CLI; make test builds it into .bin/)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:     path,
		ClientOptions:    &client.Options{Logger: quiet{}},
		LogLevel:         "error",
		SearchAttributes: SearchAttributes(),
		ExtraArgs:        append(append([]string(nil), ServerFlags...), extra...),
	})
	if err != nil {
		tb.Fatalf("start a Temporal dev server of the test's own: %v", err)
	}
	tb.Cleanup(func() { _ = s.Stop() })
	e := &Env{hostPort: s.FrontendHostPort(), namespace: "default"}
	c, err := client.Dial(client.Options{HostPort: e.hostPort, Namespace: e.namespace, Logger: quiet{}})
	if err != nil {
		tb.Fatalf("Temporal client of the test's own dev server: %v", err)
	}
	e.client = c
	tb.Cleanup(c.Close)
	return e
}

// quiet drops the SDK's log lines: a failing test says what went wrong itself.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
