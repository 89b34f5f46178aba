// Command intake is paritysync's PMS-facing HTTP API: batches of mutations, webhook
// changes into the channels' burst smoothers with admission control, outcomes,
// channel pause and resume, the quota and the dead-letter queue. The contract is
// GET /openapi.yaml; the README's "HTTP API" section has curl examples.
//
// Configuration: PARITYSYNC_INTAKE_ADDR (default 127.0.0.1:8080),
// PARITYSYNC_API_KEYS_FILE (required: one
// "tenant:<sha256 hex of the key>[:admin][:properties=<glob>,…]" per line, re-read
// when it changes), PARITYSYNC_SMOOTHER_MAX_PENDING (the admission limit of
// the channel smoothers intake starts; default models.DefaultMaxPending),
// PARITYSYNC_SUBMIT_LINGER (how long an idle channel submitter waits for more posts
// before it sends their changes as one update; default 0), PARITYSYNC_MAX_CONNS and
// PARITYSYNC_MAX_CONNS_PER_IP (open connections in all and from one client address;
// default 4096 and 128), PARITYSYNC_CALLBACKS_FILE (optional: per tenant, the
// secret that signs completion callbacks and the URLs they may go to; see
// callbacks.go), and the settings the worker and starter share
// (TEMPORAL_ADDRESS, REDIS_URL, PARITYSYNC_DATABASE_URL, PARITYSYNC_CHANNELS_FILE …).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, nil)
	stop()
	if err != nil {
		slog.Error("intake", "error", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully: it stops accepting, lets
// requests in flight finish (up to PARITYSYNC_SHUTDOWN_TIMEOUT) and closes its
// connections. ready, when set, receives the listening address.
func run(ctx context.Context, getenv func(string) string, ready chan<- string) error {
	dial.QuietRedisLogs()
	s, err := config.LoadSettings(getenv)
	if err != nil {
		return err
	}
	chs, err := config.LoadChannels(s.ChannelsFile, getenv)
	if err != nil {
		return err
	}
	is, err := config.LoadIntakeSettings(getenv)
	if err != nil {
		return err
	}
	addr, keysFile := is.Addr, is.APIKeysFile
	callbacks, err := loadCallbacks(strings.TrimSpace(getenv("PARITYSYNC_CALLBACKS_FILE")))
	if err != nil {
		return err
	}
	cfg := Config{Settings: s, Channels: chs, SmootherMaxPending: is.SmootherMaxPending, SubmitLinger: is.SubmitLinger,
		Callbacks: callbacks}
	log := slog.Default()
	log.Info("effective config", "settings", s.String(), "addr", addr, "api_keys_file", keysFile,
		"smoother_max_pending", cfg.SmootherMaxPending, "submit_linger", cfg.SubmitLinger,
		"callback_tenants", len(callbacks.tenants), "max_conns", cmp.Or(is.MaxConns, DefaultMaxConns), "max_conns_per_ip", cmp.Or(is.MaxConnsPerIP, DefaultMaxConnsPerIP))
	keys, err := newKeyring(keysFile, func(err error) { log.Error("API keys file not reloaded; the keys last read stay", "error", err) })
	if err != nil {
		return err
	}
	tc, err := dial.Temporal(ctx, s, client.Options{Logger: tlog.NewStructuredLogger(log)})
	if err != nil {
		return err
	}
	defer tc.Close()
	rdb, err := dial.Redis(ctx, s.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	st, err := store.Open(ctx, s.DatabaseURL)
	if err != nil {
		return fmt.Errorf("postgres at %s: %w", config.MaskURL(s.DatabaseURL), err)
	}
	defer st.Close()
	srv, err := NewServer(cfg, tc, rdb, st, keys, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// A 32 MiB batch over a slow link still fits; a body must also keep the
		// pace readBody asks for, so a trickling client is cut long before.
		ReadTimeout:  DefaultBodyMaxTime,
		WriteTimeout: 2 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("PARITYSYNC_INTAKE_ADDR %s: %w", addr, err)
	}
	maxConns, perIP := cmp.Or(is.MaxConns, DefaultMaxConns), cmp.Or(is.MaxConnsPerIP, DefaultMaxConnsPerIP)
	ln := newConnLimiter(tcp, maxConns, perIP)
	srv.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "paritysync_intake_connections_refused_total",
		Help: "Connections closed on accept: over PARITYSYNC_MAX_CONNS, or over PARITYSYNC_MAX_CONNS_PER_IP from one address.",
	}, func() float64 { return float64(ln.refused.Load()) }))
	log.Info("intake listening", "addr", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	return serve(ctx, hs, ln, s.ShutdownTimeout, log)
}

// serve answers on ln until ctx ends, then shuts hs down: it stops accepting,
// lets the requests in flight finish within grace and closes idle connections.
func serve(ctx context.Context, hs *http.Server, ln net.Listener, grace time.Duration, log *slog.Logger) error {
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("intake shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("intake stopped")
	return nil
}
