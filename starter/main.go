// Command starter is the PMS and operator command line of paritysync: start a batch
// and watch it, pause and resume a channel, read the dead-letter queue and the
// quota, and write a sample batch.
//
//	starter batch start --file batch.json [--id ID] [--wait]
//	starter batch submit --file F [--json]
//	starter batch status ID
//	starter batch cancel ID
//	starter batch rejections ID [--json]
//	starter batch outcome ID --mutation M [--json]
//	starter channel pause NAME --reason R
//	starter channel resume NAME
//	starter dlq list [--channel C] [--count N]
//	starter dlq export|ack|replay [--channel C] [--reason R] [--batch B] [--id N,…]
//	starter quota [--channel C]
//	starter reconcile run [--channel C] [--horizon-days N] [--wait]
//	starter reconcile schedule [--cron "0 3 * * *"] [--horizon-days N]
//	starter sample --mutations N [--out F]
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit statuses: 0 everything committed or superseded, 3 some mutations rejected or
// dead-lettered, 1 an error, 2 a usage error.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitReported = 3
)

// errReported ends a batch whose mutations were not all committed or superseded.
var errReported = errors.New("some mutations were rejected or dead-lettered")

// usageError is a command line that makes no sense.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

const usage = `usage:
  starter batch start --file F [--id ID] [--wait]   start a batch (JSON array or JSON lines)
  starter batch submit --file F [--json]            hand mutations to the burst smoothers; an answer per mutation
  starter batch status ID                           state, and per-update progress from the store
  starter batch cancel ID                           cancel: every update ends committed or cancelled
  starter batch rejections ID [--json]              every rejected mutation with its reasons
  starter batch outcome ID --mutation M [--json]    one mutation's fate
  starter channel pause NAME --reason R             pause a channel everywhere
  starter channel resume NAME                       resume it
  starter dlq list [--channel C] [--count N]        read the dead-letter queue
  starter dlq export [--channel C] [--reason R] [--batch B] [--id N,…] [--acked]   JSON lines
  starter dlq ack [selection] [--note N]            mark entries as dealt with
  starter dlq replay [selection] [--wait]           re-send them as a new batch, then ack them
  starter quota [--channel C]                       limiter and daily quota state
  starter reconcile run [--channel C] [--wait]      read channels back, re-send what drifted
  starter reconcile schedule [--cron "0 3 * * *"]   run that nightly (a Temporal Schedule)
  starter sample --mutations N [--out F]            write a realistic sample batch
configuration comes from the environment (PARITYSYNC_DATABASE_URL, REDIS_URL, TEMPORAL_ADDRESS, ...; see README)`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	err := dispatch(args, stdout, getenv)
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errReported):
		return exitReported
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "starter: %s\n%s\n", ue.msg, usage)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "starter:", err)
		return exitError
	}
}

func dispatch(args []string, out io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return usageError{"no command"}
	}
	cmd, rest := args[0], args[1:]
	sub := ""
	if len(rest) > 0 {
		sub = rest[0]
	}
	switch {
	case cmd == "batch" && sub == "start":
		return batchStart(rest[1:], out, getenv)
	case cmd == "batch" && sub == "submit":
		return batchSubmit(rest[1:], out, getenv)
	case cmd == "batch" && sub == "status":
		return batchStatus(rest[1:], out, getenv)
	case cmd == "channel" && (sub == "pause" || sub == "resume"):
		return channelPause(sub == "pause", rest[1:], out, getenv)
	case cmd == "batch" && sub == "cancel":
		return batchCancel(rest[1:], out, getenv)
	case cmd == "batch" && (sub == "rejections" || sub == "outcome"):
		return batchOutcomes(sub == "rejections", rest[1:], out, getenv)
	case cmd == "dlq" && sub == "list":
		return dlqList(rest[1:], out, getenv)
	case cmd == "dlq" && (sub == "export" || sub == "ack" || sub == "replay"):
		return dlqCommand(sub, rest[1:], out, getenv)
	case cmd == "reconcile" && (sub == "run" || sub == "schedule"):
		return reconcile(sub == "schedule", rest[1:], out, getenv)
	case cmd == "quota":
		return quota(rest, out, getenv)
	case cmd == "sample":
		return sample(rest, out)
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Fprintln(out, usage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown command %q", strings.Join(args[:min(2, len(args))], " "))}
}
