// Command starter is the PMS and operator command line of paritysync: start a batch
// and follow it, pause and resume a channel, read the dead-letter queue and the
// quota, plan a burst, parse a Retry-After value and write a sample batch. Run
// `starter --help`, or `starter COMMAND --help`, for every command and flag.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/interceptor"

	"github.com/paritysync/paritysync/dial"
)

// version is stamped by the build (-ldflags "-X main.version=..."); otherwise the
// module version or VCS revision from the build info is shown.
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v += " " + s.Value
			}
		}
	}
	return v
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// cli is what every command shares: where data and diagnostics go, the output
// format and the environment the configuration is read from.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	output         string
	// interceptors wrap the Temporal client the commands dial (the tests count
	// its calls); none in production.
	interceptors []interceptor.ClientInterceptor
}

// json reports whether --output json was asked for.
func (c *cli) json() bool { return c.output == "json" }

// diag writes a diagnostic line to stderr: progress, hints, warnings — never data.
func (c *cli) diag(format string, args ...any) { fmt.Fprintf(c.stderr, format+"\n", args...) }

// run executes one command line and returns its exit status (see exitHelp).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	// go-redis would print its pool's dial retries before the one error we report.
	dial.QuietRedisLogs()
	c := &cli{stdout: stdout, stderr: stderr, getenv: getenv}
	root := c.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	var te tierExit
	switch {
	case errors.As(err, &te), errors.Is(err, errReported):
		// The command printed its result; the status says how it went.
	case code == exitUsage:
		fmt.Fprintf(stderr, "starter: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
	default:
		fmt.Fprintf(stderr, "starter: %v\n", err)
	}
	return code
}

func (c *cli) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "starter",
		Short: "Operate paritysync: batches, channels, dead letters, quota and planning tools",
		Long: `starter is paritysync's command line for a PMS integration and for operators.

Configuration comes from the environment: REDIS_URL (one node, or a cluster as
redis://host1:port1,host2:port2), TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, the Temporal
TLS and API key files (TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY, TEMPORAL_TLS_CA,
TEMPORAL_API_KEY_FILE), PARITYSYNC_CHANNELS_FILE and the rest listed in the README.

starter acts as an operator: it reaches Temporal, Redis and PostgreSQL directly,
so it sees every tenant's batches, channels and dead letters and writes every
property, as an operator key does over the API. PARITYSYNC_TENANT=<tenant> makes
'batch start' start the batch as that tenant's (id <tenant>.…, readable with the
tenant's API key); a tenant's own PMS posts through intake, which holds it to the
properties of its key.

Data goes to stdout (a table, or JSON with --output json); progress and errors go
to stderr.` + "\n\n" + exitHelp,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("a command is required")
		},
	}
	root.PersistentFlags().StringVarP(&c.output, "output", "o", "table", "output format: table or json")
	if err := root.RegisterFlagCompletionFunc("output", completeOutput); err != nil {
		panic(err)
	}
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if c.output != "table" && c.output != "json" {
			return usageError(fmt.Sprintf("--output %q: want table or json", c.output))
		}
		return nil
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err.Error()) })
	root.AddCommand(c.batchCmd(), c.channelCmd(), c.dlqCmd(), c.quotaCmd(), c.reconcileCmd(),
		c.sampleCmd(), c.retryAfterCmd(), c.smoothCmd(), c.simulateCmd(), c.statusCmd())
	return root
}

// group is a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short, Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError(fmt.Sprintf("%s: a subcommand is required", cmd.CommandPath()))
		}}
	g.AddCommand(subs...)
	return g
}

// noArgs refuses stray arguments, naming an unknown subcommand as such.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usageError(fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath()))
		}
		return usageError(fmt.Sprintf("%s takes no arguments, got %q", cmd.CommandPath(), strings.Join(args, " ")))
	}
	return nil
}

// exactArgs wants n arguments, described by what.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError(fmt.Sprintf("%s: want %s", cmd.CommandPath(), what))
		}
		return nil
	}
}

// required marks flags required; cobra's error for a missing one becomes a usage error.
func required(cmd *cobra.Command, names ...string) {
	for _, n := range names {
		if err := cmd.MarkFlagRequired(n); err != nil {
			panic(err) // a flag name typo in this file
		}
	}
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}
