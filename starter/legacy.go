package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/models"
)

// The batch lifecycle and dead-letter commands (lifecycle.go, dlq.go) parse their
// own flags with the standard library; legacyCmd gives each a place in the command
// tree, and these helpers give them the CLI's connections, output and verdicts.

// legacyCmd is a command whose flags fn parses itself; help comes from long.
func (c *cli) legacyCmd(use, short, long string, fn func(args []string, out io.Writer, getenv func(string) string) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Long: long,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if a == "--help" || a == "-h" || a == "-help" {
					return cmd.Help()
				}
			}
			return fn(args, c.stdout, c.getenv)
		},
	}
}

// loadDeps is the configuration and connections of a flag-parsing command.
func loadDeps(getenv func(string) string) (*deps, error) {
	return (&cli{getenv: getenv}).deps()
}

// parseFlags parses fs and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("%s: %v", fs.Name(), err)}
	}
	return nil
}

// follow follows a batch for a flag-parsing command, progress on out.
func follow(ctx context.Context, tc client.Client, run client.WorkflowRun, out io.Writer,
	_ func(context.Context) ([]models.ChannelCounts, error)) (models.BatchStatus, error) {
	c := &cli{stdout: out, stderr: out}
	return c.follow(ctx, tc, run)
}

// summary prints a batch's table on out and returns its verdict.
func summary(st models.BatchStatus, out io.Writer) error {
	c := &cli{stdout: out, stderr: out}
	return c.summary(st)
}

// lifecycleCmds are the batch lifecycle commands beside start, status and submit.
func (c *cli) lifecycleCmds() []*cobra.Command {
	return []*cobra.Command{
		c.legacyCmd("cancel BATCH_ID", "Cancel a batch: every update ends committed or cancelled",
			`Cancel a running batch. In-flight pushes finish and record their outcomes; every
update still waiting gets the outcome cancelled, and the batch ends cancelled.`,
			batchCancel),
		c.legacyCmd("rejections BATCH_ID [--json]", "Every rejected mutation of a batch with its reasons",
			`List every rejected mutation of a batch with each field and rule it broke
(--json: one JSON line per mutation).`,
			func(args []string, out io.Writer, getenv func(string) string) error {
				return batchOutcomes(true, args, out, getenv)
			}),
		c.legacyCmd("outcome BATCH_ID --mutation M [--json]", "One mutation's fate in a batch",
			`Print the outcome of mutation M in a batch, per endpoint family: committed,
superseded, rejected, dead-lettered or cancelled, with the reason.`,
			func(args []string, out io.Writer, getenv func(string) string) error {
				return batchOutcomes(false, args, out, getenv)
			}),
	}
}

// dlqCmds are the dead-letter commands beside list.
func (c *cli) dlqCmds() []*cobra.Command {
	const sel = `Entries are selected with --channel C, --reason R, --batch B and --id N,… (and
--acked for entries already acknowledged).`
	return []*cobra.Command{
		c.legacyCmd("export [--channel C] [--reason R] [--batch B] [--id N,…] [--acked]",
			"Write dead letters as JSON lines", "Write the selected dead letters as JSON lines.\n"+sel,
			func(args []string, out io.Writer, getenv func(string) string) error {
				return dlqCommand("export", args, out, getenv)
			}),
		c.legacyCmd("ack [selection] [--note N]", "Mark dead letters as dealt with",
			"Acknowledge the selected dead letters, with an optional --note.\n"+sel,
			func(args []string, out io.Writer, getenv func(string) string) error {
				return dlqCommand("ack", args, out, getenv)
			}),
		c.legacyCmd("replay [selection] [--wait]", "Re-send dead letters' newest desired values as a new batch",
			`Re-send the selected dead letters as a new batch — the newest desired values of
their cells, never older ones — then acknowledge them (--wait follows the batch).
`+sel,
			func(args []string, out io.Writer, getenv func(string) string) error {
				return dlqCommand("replay", args, out, getenv)
			}),
	}
}
