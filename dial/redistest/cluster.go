// Package redistest gives tests their Redis: the one at REDIS_URL under a key
// prefix of the test's own (Client, Reachable), or a real Redis Cluster on loopback
// ports (Start): masters, optionally a replica each, joined with redis-cli --cluster
// create. A missing Redis or redis-server fails the test under
// PARITYSYNC_TEST_REQUIRE (make test sets it) and skips it otherwise (package
// testenv).
package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paritysync/paritysync/dial/testenv"
)

// Options shape a cluster.
type Options struct {
	// Masters is the number of masters (at least 3, Redis Cluster's minimum).
	Masters int
	// Replicas is the number of replicas per master.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a master may be unreachable
	// before its replica is promoted (Redis' default is 15 s).
	NodeTimeout time.Duration
}

// Cluster is a running Redis Cluster; everything stops and is removed when the test
// ends.
type Cluster struct {
	// URL is the cluster form of REDIS_URL: every node's address.
	URL string
	// Ports are the nodes' ports, masters first as created.
	Ports []int

	t      testing.TB
	dir    string
	server string
	cli    string
	opt    Options
	mu     sync.Mutex
	procs  map[int]*exec.Cmd
	exited map[int]chan struct{} // closed when the node's process has been waited for
}

// Start starts the cluster. Without redis-server (or redis-cli) on the PATH the
// test fails under PARITYSYNC_TEST_REQUIRE and skips otherwise.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server not found on the PATH: the Redis Cluster test starts its own nodes (apt-get install redis-server)", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		testenv.Unavailable(t, "redis-cli not found on the PATH: the Redis Cluster test joins its nodes with it (apt-get install redis-tools)", err)
	}
	if o.Masters < 3 {
		o.Masters = 3
	}
	c := &Cluster{t: t, dir: t.TempDir(), server: server, cli: cli, opt: o, procs: map[int]*exec.Cmd{}, exited: map[int]chan struct{}{}}
	c.Ports = freeClusterPorts(t, o.Masters*(1+o.Replicas))
	var addrs []string
	for _, p := range c.Ports {
		c.StartNode(p)
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for port, cmd := range c.procs {
			_ = cmd.Process.Kill()
			<-c.exited[port] // StartNode's goroutine waits for it: one Wait per process
		}
	})
	for _, p := range c.Ports {
		WaitFor(t, 10*time.Second, fmt.Sprintf("redis-server on %d", p), func() bool {
			out, err := c.CLI(p, "ping")
			return err == nil && strings.TrimSpace(out) == "PONG"
		})
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	for _, p := range c.Ports {
		WaitFor(t, 30*time.Second, fmt.Sprintf("cluster_state:ok on %d", p), func() bool {
			out, err := c.CLI(p, "cluster", "info")
			return err == nil && strings.Contains(out, "cluster_state:ok")
		})
	}
	if o.Replicas > 0 {
		// Every replica has finished its first sync before the cluster is handed out.
		WaitFor(t, 30*time.Second, "replicas in sync", func() bool {
			n := 0
			for _, p := range c.Ports {
				info, err := c.CLI(p, "info", "replication")
				if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
					n++
				}
			}
			return n == o.Masters*o.Replicas
		})
	}
	c.URL = "redis://" + strings.Join(addrs, ",")
	return c
}

// StartNode starts (or restarts, with its cluster config file) the node on port.
func (c *Cluster) StartNode(port int) {
	c.t.Helper()
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(c.dir, fmt.Sprintf("nodes-%d.conf", port)), "--dir", c.dir,
		"--dbfilename", fmt.Sprintf("dump-%d.rdb", port),
		"--save", "", "--appendonly", "no", "--protected-mode", "no"}
	if c.opt.NodeTimeout > 0 {
		args = append(args, "--cluster-node-timeout", strconv.FormatInt(c.opt.NodeTimeout.Milliseconds(), 10))
	}
	cmd := exec.Command(c.server, args...)
	log, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("redis-%d.log", port)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatalf("redis log: %v", err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start redis-server on %d: %v", port, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(exited) }()
	c.mu.Lock()
	c.procs[port], c.exited[port] = cmd, exited
	c.mu.Unlock()
}

// Kill sends SIGKILL to the node on port: it loses whatever it had not replicated.
func (c *Cluster) Kill(port int) {
	c.t.Helper()
	c.mu.Lock()
	cmd := c.procs[port]
	delete(c.procs, port)
	c.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("no redis-server on %d", port)
	}
	_ = cmd.Process.Kill()
}

// CLI runs redis-cli against the node on port and returns its output.
func (c *Cluster) CLI(port int, args ...string) (string, error) {
	out, err := exec.Command(c.cli, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)...).Output()
	return string(out), err
}

// freeClusterPorts finds n ports whose cluster bus port (port+10000) is free too.
func freeClusterPorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n && tries < 500; tries++ {
		p := 30000 + rand.IntN(15000)
		if !seen[p] && !seen[p+10000] && Free(p) && Free(p+10000) {
			ports = append(ports, p)
			seen[p], seen[p+10000] = true, true
		}
	}
	if len(ports) != n {
		t.Fatalf("no %d free loopback ports for the cluster", n)
	}
	return ports
}

// Free reports whether nothing listens on the loopback port.
func Free(port int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// WaitFor polls ok every 100 ms and fails the test after limit.
func WaitFor(t testing.TB, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not ready after %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
