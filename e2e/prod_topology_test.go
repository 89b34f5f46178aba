//go:build prod

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
)

// The production topology, on loopback and without Docker: the real Temporal server
// (go.temporal.io/server/cmd/server, the version the CLI embeds) on PostgreSQL with
// its schema created by the server's SQL tool and deploy/'s configuration, a Redis
// Cluster of three masters with a replica each, the simulator over HTTP, and workers
// that are OS processes of the worker binary, so that kill -9 means what it says.
// `make test-prod` runs it (build tag prod).

// quiet is a Temporal SDK logger that says nothing.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}

// prodTopology is the shared part: one Temporal server and one Redis Cluster.
type prodTopology struct {
	t         *testing.T
	dir       string
	root      string // the repository
	serverBin string
	cli       string
	workerBin string
	serverEnv []string
	frontend  string
	server    *exec.Cmd
	exited    chan struct{}
	redis     *redistest.Cluster
	tc        client.Client
}

// binary is the file an environment variable names, or .bin/name.
func binary(t *testing.T, env, name string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join("..", ".bin", name)
	}
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("no %s at %s (make test-prod builds it into .bin/; or set %s): %v", name, abs, env, err)
	}
	return abs
}

// freePorts finds n distinct free loopback ports below the Redis Cluster's range.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for p := 21000 + int(time.Now().UnixNano()%4000); len(ports) < n && p < 29000; p += 7 {
		if redistest.Free(p) {
			ports = append(ports, p)
		}
	}
	require.Len(t, ports, n, "free loopback ports")
	return ports
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startProdTopology brings up the Temporal server on two databases of its own, the
// Redis Cluster and the worker binary; everything is stopped and dropped at the end.
// The worker binary builds and the two schemas are created while the cluster comes
// up; the server starts once its schemas are there.
func startProdTopology(t *testing.T) *prodTopology {
	t.Helper()
	began := time.Now()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	p := &prodTopology{t: t, dir: t.TempDir(), root: root,
		serverBin: binary(t, "TEMPORAL_SERVER", "server"), cli: temporalCLI(t)}
	p.cli, err = filepath.Abs(p.cli)
	require.NoError(t, err)
	sqlTool := binary(t, "TEMPORAL_SQL_TOOL", "sql")

	p.workerBin = filepath.Join(p.dir, "worker")
	built := make(chan error, 1)
	go func() {
		out, err := exec.Command("go", "build", "-o", p.workerBin, "../worker").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("build the worker: %w: %s", err, out)
		}
		built <- err
	}()

	// Temporal's two databases, created and migrated by its SQL tool.
	admin := os.Getenv("PARITYSYNC_ADMIN_DATABASE_URL")
	if admin == "" {
		admin = storetest.DatabaseURL()
	}
	u, err := url.Parse(admin)
	require.NoError(t, err)
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	user := u.User.Username()
	password, _ := u.User.Password()
	suffix := randomSuffix()
	dbs := map[string]string{
		"temporal_prod_" + suffix:     "postgresql/v12/temporal",
		"temporal_prod_vis_" + suffix: "postgresql/v12/visibility",
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Errorf("drop Temporal's databases: %v", err)
			return
		}
		defer conn.Close(context.Background())
		for db := range dbs {
			if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
				t.Errorf("drop %s: %v", db, err)
			}
		}
	})
	// The two databases side by side, each its steps in order.
	schemas := make(chan error, len(dbs))
	for db, schema := range dbs {
		go func() {
			base := []string{"--plugin", "postgres12", "--ep", host, "--port", port, "--user", user, "--db", db}
			if password != "" {
				base = append(base, "--password", password)
			}
			for _, step := range [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"},
				{"update-schema", "--schema-name", schema}} {
				out, err := exec.Command(sqlTool, append(slices.Clone(base), step...)...).CombinedOutput()
				if err != nil {
					schemas <- fmt.Errorf("temporal sql tool %s on %s: %w: %s", step[0], db, err, out)
					return
				}
			}
			schemas <- nil
		}()
	}

	p.redis = redistest.Start(t, redistest.Options{Masters: 3, Replicas: 1, NodeTimeout: 2 * time.Second})
	clusterDone := time.Since(began)
	for range dbs {
		require.NoError(t, <-schemas)
	}
	schemaDone := time.Since(began)

	ports := freePorts(t, 9)
	p.frontend = "127.0.0.1:" + strconv.Itoa(ports[0])
	vars := map[string]string{
		"TEMPORAL_DB": "temporal_prod_" + suffix, "TEMPORAL_VISIBILITY_DB": "temporal_prod_vis_" + suffix,
		"TEMPORAL_PG_ADDR": host + ":" + port, "TEMPORAL_PG_USER": user, "TEMPORAL_PG_PASSWORD": password,
		"TEMPORAL_DYNAMIC_CONFIG":           filepath.Join(root, "deploy", "temporal-dynamic-config.yaml"),
		"TEMPORAL_FRONTEND_PORT":            strconv.Itoa(ports[0]),
		"TEMPORAL_FRONTEND_MEMBERSHIP_PORT": strconv.Itoa(ports[1]),
		"TEMPORAL_FRONTEND_HTTP_PORT":       strconv.Itoa(ports[2]),
		"TEMPORAL_MATCHING_PORT":            strconv.Itoa(ports[3]),
		"TEMPORAL_MATCHING_MEMBERSHIP_PORT": strconv.Itoa(ports[4]),
		"TEMPORAL_HISTORY_PORT":             strconv.Itoa(ports[5]),
		"TEMPORAL_HISTORY_MEMBERSHIP_PORT":  strconv.Itoa(ports[6]),
		"TEMPORAL_WORKER_PORT":              strconv.Itoa(ports[7]),
		"TEMPORAL_WORKER_MEMBERSHIP_PORT":   strconv.Itoa(ports[8]),
	}
	p.serverEnv = os.Environ()
	for k, v := range vars {
		p.serverEnv = append(p.serverEnv, k+"="+v)
	}
	p.startServer()
	t.Cleanup(func() { p.stopServer() })

	// The default namespace and paritysync's search attributes, as the compose
	// file's setup service does.
	out, err := p.temporal("operator", "namespace", "create", "--namespace", "default", "--retention", "72h")
	if err != nil && !strings.Contains(out, "already") {
		t.Fatalf("create namespace default: %v: %s", err, out)
	}
	redistest.WaitFor(t, time.Minute, "namespace default", func() bool {
		_, err := p.temporal("operator", "namespace", "describe", "--namespace", "default")
		return err == nil
	})
	out, err = p.temporal("operator", "search-attribute", "create", "--namespace", "default",
		"--name", models.SearchAttrChannel, "--type", "Keyword",
		"--name", models.SearchAttrBatchID, "--type", "Keyword",
		"--name", models.SearchAttrPriority, "--type", "Int")
	require.NoError(t, err, "search attributes: %s", out)

	p.tc, err = client.Dial(client.Options{HostPort: p.frontend, Namespace: "default", Logger: quiet{}})
	require.NoError(t, err)
	t.Cleanup(p.tc.Close)
	// The frontend knows the namespace and the attributes once a list query on one
	// of them succeeds.
	redistest.WaitFor(t, time.Minute, "search attributes usable", func() bool {
		_, err := p.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: models.SearchAttrBatchID + " = 'x' AND " + models.SearchAttrPriority + " = 1"})
		return err == nil
	})
	temporalDone := time.Since(began)

	require.NoError(t, <-built)
	t.Logf("topology up in %s: Redis Cluster %s (3 masters, 3 replicas) at %s, Temporal schema at %s, server with namespace "+
		"and search attributes at %s, worker binary built at %s", time.Since(began).Round(time.Second), p.redis.URL,
		clusterDone.Round(time.Second), schemaDone.Round(time.Second), temporalDone.Round(time.Second), time.Since(began).Round(time.Second))
	return p
}

// temporal runs the Temporal CLI against the server.
func (p *prodTopology) temporal(args ...string) (string, error) {
	out, err := exec.Command(p.cli, append(args, "--address", p.frontend)...).CombinedOutput()
	return string(out), err
}

// startServer starts the server process on the topology's databases and waits
// until its frontend serves.
func (p *prodTopology) startServer() {
	p.t.Helper()
	cmd := exec.Command(p.serverBin, "--root", p.root, "--config", "deploy", "--env", "temporal-server",
		"--allow-no-auth", "start")
	cmd.Env = p.serverEnv
	log, err := os.OpenFile(filepath.Join(p.dir, "temporal-server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(p.t, err)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(p.t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(exited) }()
	p.server, p.exited = cmd, exited
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := p.temporal("operator", "cluster", "health")
		if err == nil && strings.Contains(out, "SERVING") {
			return
		}
		select {
		case <-exited:
			p.t.Fatalf("the Temporal server exited at start; log:\n%s", p.tail("temporal-server.log"))
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the Temporal server is not serving after 2 minutes; log:\n%s", p.tail("temporal-server.log"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stopServer stops the server with SIGTERM, as an orchestrator does, and kills it
// after 30 s; it returns how long the server took to exit.
func (p *prodTopology) stopServer() time.Duration {
	if p.server == nil {
		return 0
	}
	start := time.Now()
	_ = p.server.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.server.Process.Kill()
		<-p.exited
	}
	p.server = nil
	return time.Since(start)
}

func (p *prodTopology) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// prodStack is one scenario's stack on the topology: the simulator, workers as
// processes, its own key prefix, task queue and PostgreSQL schema. Each worker
// reaches the simulator through a listener of its own, so the test knows which
// worker has requests in flight.
type prodStack struct {
	*e2eStack
	topo *prodTopology
	t    *testing.T
	// hold delays each answer after the channel applied the push: the request is
	// then in flight, applied but unanswered, for that long.
	hold    time.Duration
	mu      sync.Mutex
	workers []*workerProc
	ledger  *appliedLedger
	// store is the test's own connection to the stack's system of record.
	store *store.Store
}

// workerProc is one worker process and its listener.
type workerProc struct {
	n        int
	cmd      *exec.Cmd
	srv      *httptest.Server
	inflight atomic.Int64
	exited   chan struct{}
	log      string
}

// appliedLedger remembers, per night, family and version, the values the channel
// applied, and counts a night applied again at the same version with other values:
// an update applied twice with a different result.
type appliedLedger struct {
	mu        sync.Mutex
	seen      map[string]string
	conflicts []string
}

func (l *appliedLedger) note(slug string, body []byte) {
	var req models.ARIRequest
	if json.Unmarshal(body, &req) != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range req.Lines {
		values := line
		values.From, values.To, values.Version = models.Date{}, models.Date{}, 0
		b, _ := json.Marshal(values)
		for d := line.From; !d.After(line.To); d = d.AddDays(1) {
			k := fmt.Sprintf("%s/%s/%s/%s/%s/%s/v%d", slug, req.PropertyID, req.Family, line.RoomTypeCode,
				line.RatePlanCode, d, line.Version)
			if prev, ok := l.seen[k]; ok && prev != string(b) {
				l.conflicts = append(l.conflicts, k+": "+prev+" then "+string(b))
			}
			l.seen[k] = string(b)
		}
	}
}

func (l *appliedLedger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conflicts)
}

// serve passes one request to the simulator, notes what it applied, holds the answer
// and counts the request in flight on this worker's listener meanwhile.
func (s *prodStack) serve(w *workerProc) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.inflight.Add(1)
		defer w.inflight.Add(-1)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		s.Sim.ServeHTTP(rec, r)
		if r.Method == http.MethodPost && (rec.Code == http.StatusOK || rec.Code == http.StatusMultiStatus) {
			s.ledger.note(strings.Trim(strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0], "/"), body)
		}
		if s.hold > 0 {
			select {
			case <-time.After(s.hold):
			case <-r.Context().Done():
			}
		}
		maps.Copy(rw.Header(), rec.Header())
		rw.WriteHeader(rec.Code)
		_, _ = rw.Write(rec.Body.Bytes())
	})
}

// newProdStack starts a stack on the topology, shaped like the dev-server stacks.
func (p *prodTopology) newProdStack(t *testing.T, o stack.Options, hold time.Duration) *prodStack {
	t.Helper()
	s := &prodStack{topo: p, t: t, hold: hold, ledger: &appliedLedger{seen: map[string]string{}},
		e2eStack: &e2eStack{stack.New(t, "prod", map[string]string{
			"REDIS_URL":          p.redis.URL,
			"TEMPORAL_ADDRESS":   p.frontend,
			"TEMPORAL_NAMESPACE": "default",
		}, o)}}
	s.TC = p.tc
	t.Cleanup(func() {
		s.mu.Lock()
		workers := slices.Clone(s.workers)
		s.mu.Unlock()
		for _, w := range workers {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, w := range workers {
			select {
			case <-w.exited:
			case <-time.After(15 * time.Second):
				_ = w.cmd.Process.Kill()
				<-w.exited
			}
			w.srv.Close()
		}
	})
	s.store = s.OpenStore(t)
	var wg sync.WaitGroup
	for range max(1, o.Workers) {
		wg.Add(1)
		go func() { defer wg.Done(); s.startWorker() }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return s
}

// startWorker starts one more worker process and waits until it polls.
func (s *prodStack) startWorker() *workerProc {
	s.mu.Lock()
	w := &workerProc{n: len(s.workers) + 1, exited: make(chan struct{})}
	s.workers = append(s.workers, w)
	s.mu.Unlock()
	w.srv = httptest.NewServer(s.serve(w))
	w.log = filepath.Join(s.topo.dir, fmt.Sprintf("worker-%s-%d.log", s.Queue, w.n))
	log, err := os.Create(w.log)
	if err != nil {
		s.t.Errorf("worker log: %v", err)
		return w
	}
	w.cmd = exec.Command(s.topo.workerBin)
	w.cmd.Env = os.Environ()
	for k, v := range s.Env {
		w.cmd.Env = append(w.cmd.Env, k+"="+v)
	}
	w.cmd.Env = append(w.cmd.Env, "PARITYSYNC_CHANNEL_URL="+w.srv.URL)
	w.cmd.Stdout, w.cmd.Stderr = log, log
	if err := w.cmd.Start(); err != nil {
		s.t.Errorf("start worker: %v", err)
		return w
	}
	go func() { _ = w.cmd.Wait(); _ = log.Close(); close(w.exited) }()
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(w.log)
		if bytes.Contains(b, []byte("worker started")) {
			return w
		}
		select {
		case <-w.exited:
			s.t.Errorf("worker %d exited at start:\n%s", w.n, b)
			return w
		default:
		}
		if time.Now().After(deadline) {
			s.t.Errorf("worker %d not started after a minute:\n%s", w.n, b)
			return w
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// live is the workers still running.
func (s *prodStack) live() []*workerProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*workerProc
	for _, w := range s.workers {
		select {
		case <-w.exited:
		default:
			out = append(out, w)
		}
	}
	return out
}

// kill9 kills the worker process with SIGKILL and waits for it to be gone.
func (s *prodStack) kill9(w *workerProc) {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
}

// accepted is the pushes the channels took.
func (s *prodStack) accepted() int {
	n := 0
	for _, c := range s.Sim.Stats() {
		n += c.Accepted
	}
	return n
}
