// Command worker runs paritysync's Temporal worker: the BatchSync and ChannelSync
// workflows and the activities that push to channels through the shared limiter.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/worker/app"
)

// version is stamped by the build (-ldflags "-X main.version=...").
var version = ""

func main() {
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run paritysync's Temporal worker",
		Long: `worker runs paritysync's Temporal worker: the BatchSync, ChannelSync,
BurstSmoother and Reconcile workflows and the activities that push to the channels
through the shared limiter. It runs until SIGINT or SIGTERM, then lets in-flight
activities finish (PARITYSYNC_SHUTDOWN_TIMEOUT).

Configuration comes from the environment; the effective configuration is logged at
start with secrets masked:
  REDIS_URL                  redis://host:6379/0, or a cluster: redis://h1:7000,h2:7001,h3:7002
  TEMPORAL_ADDRESS           host:port of the Temporal frontend (127.0.0.1:7233)
  TEMPORAL_NAMESPACE         default
  TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY   client certificate and key files (mutual TLS)
  TEMPORAL_TLS_CA            CA bundle file, for a server with a private CA
  TEMPORAL_TLS_SERVER_NAME   the server certificate's name, when not the address's host
  TEMPORAL_API_KEY_FILE      file holding an API key (Temporal Cloud); re-read on change
  PARITYSYNC_CHANNEL_URL, PARITYSYNC_TOKEN_FILE (or PARITYSYNC_TOKEN)   the channels
  PARITYSYNC_CHANNELS_FILE   YAML channel limits; PARITYSYNC_CHANNEL_<SLUG>_<FIELD> overrides
  PARITYSYNC_TIME_ZONE, PARITYSYNC_PROPERTY_ZONES   "today" per property (default UTC)
  PARITYSYNC_METRICS_ADDR    /metrics and /healthz (127.0.0.1:9464)
See the README for the rest.`,
		Version:       versionString(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(*cobra.Command, []string) error { return run() },
	}
	return cmd
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return "(devel)"
}

func run() error {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	a := app.New(os.Getenv)
	if err := a.Err(); err != nil {
		return app.OneLine(err)
	}
	startCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(startCtx); err != nil {
		return app.OneLine(err)
	}
	sig := <-a.Wait()
	slog.Info("stopping", "signal", sig.Signal)
	// Long enough for in-flight activities to finish (the worker's stop timeout).
	stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return a.Stop(stopCtx)
}
