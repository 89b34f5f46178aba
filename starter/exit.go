package main

import (
	"context"
	"errors"
	"strings"

	"github.com/paritysync/paritysync/dial"
)

// Exit statuses. 0–3 are results a script acts on; failures use the sysexits.h
// numbers, so a result is never mistaken for a failure.
const (
	exitOK = 0
	// quota: the worst (or the named channel's) daily-quota tier.
	exitWarn     = 1 // ≥ 70 %
	exitPage     = 2 // ≥ 85 %
	exitThrottle = 3 // ≥ 95 %: throttled, or stopped at 100 %
	// batch start --wait, batch status, batch submit: the batch ended, but some
	// mutations were rejected or dead-lettered (or refused as unknown).
	exitReported    = 3
	exitUsage       = 64  // a command line that makes no sense
	exitData        = 65  // an input file that cannot be read as mutations or changes
	exitNotFound    = 66  // the batch, mutation or dead letter named does not exist
	exitUnavailable = 69  // Redis or Temporal did not answer
	exitError       = 70  // anything else that went wrong
	exitRefused     = 75  // admission refused: a channel's smoother is full, retry later
	exitConfig      = 78  // the configuration (environment, channels file) is wrong
	exitInterrupted = 130 // Ctrl-C; a started batch goes on without the CLI
)

const exitHelp = `Exit status:
  0   done; quota: every channel below 70 %; status: all well
  1   quota: warn (≥ 70 % of the daily quota); status: warn (paused, back-off,
      dead letters, parity lag over 10 min)
  2   quota: page (≥ 85 %); status: page (no worker polling, breaker open)
  3   quota: throttle or stop (≥ 95 %); status: critical; batch: some mutations
      rejected or dead-lettered
  64  usage error
  65  input file unreadable (names the file, line and field)
  66  not found: no such batch, or no outcome for the mutation named
  69  Redis, Temporal or PostgreSQL unreachable
  70  other error
  75  admission refused: the channel's smoother is full, submit again later
  78  configuration error
  130 interrupted (a batch already started keeps running)`

// statusError is a failure that names the exit status it ends the command with.
type statusError struct {
	code int
	err  error
}

func (e statusError) Error() string { return e.err.Error() }
func (e statusError) Unwrap() error { return e.err }

// usageError is a command line that makes no sense.
func usageError(msg string) error { return statusError{exitUsage, errors.New(msg)} }

// dataError is an input file that cannot be used.
func dataError(err error) error { return statusError{exitData, err} }

// notFoundError is a batch, mutation or dead letter named on the command line
// that does not exist.
func notFoundError(msg string) error { return statusError{exitNotFound, errors.New(msg)} }

// configError is a configuration that cannot be used.
func configError(err error) error { return statusError{exitConfig, err} }

// refusedError is work a channel's smoother refused by admission control.
func refusedError(err error) error { return statusError{exitRefused, err} }

// interruptedError is Ctrl-C; the message says what goes on without the CLI.
func interruptedError(msg string) error { return statusError{exitInterrupted, errors.New(msg)} }

// tierExit carries quota's result status.
type tierExit struct{ code int }

func (e tierExit) Error() string { return "quota tier" }

// errReported ends a batch whose mutations were not all committed or superseded.
var errReported = errors.New("some mutations were rejected or dead-lettered")

func exitCode(err error) int {
	var (
		se statusError
		te tierExit
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &te):
		return te.code
	case errors.Is(err, errReported):
		return exitReported
	case isCobraUsage(err):
		return exitUsage
	case errors.As(err, &se):
		return se.code
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case dial.IsUnreachable(err):
		return exitUnavailable
	}
	return exitError
}

// isCobraUsage recognises the argument errors cobra returns as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"required flag(s)", "unknown command", "unknown flag", "unknown shorthand flag",
		"flag needs an argument", "invalid argument", "accepts ", "requires at least"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
