// Command worker runs paritysync's Temporal worker: the BatchSync and ChannelSync
// workflows and the activities that push to channels through the shared limiter.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	app := newApp(os.Getenv)
	if err := app.Err(); err != nil {
		return oneLine(err)
	}
	startCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return oneLine(err)
	}
	sig := <-app.Wait()
	slog.Info("stopping", "signal", sig.Signal)
	// Long enough for in-flight activities to finish (the worker's stop timeout).
	stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return app.Stop(stopCtx)
}

// startupError is a dependency that cannot be reached at start; its message is the
// one line an operator needs, without fx's wrapping.
type startupError struct{ err error }

func (e startupError) Error() string { return e.err.Error() }
func (e startupError) Unwrap() error { return e.err }

func oneLine(err error) error {
	var se startupError
	if errors.As(err, &se) {
		return se
	}
	return err
}
