package main

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// worker --help must print help, never start a worker: with nothing listening on
// the default addresses, starting would fail with a connection error instead.
func TestHelpPrintsHelpInsteadOfStarting(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--version"}} {
		cmd := rootCmd()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(args)
		cmd.RunE = func(_ *cobra.Command, _ []string) error {
			t.Fatalf("%v started the worker", args)
			return nil
		}
		require.NoError(t, cmd.Execute(), "%v", args)
		require.Empty(t, errOut.String())
		if args[0] == "--version" {
			require.Contains(t, out.String(), "worker version")
			continue
		}
		require.Contains(t, out.String(), "Usage:")
		require.Contains(t, out.String(), "TEMPORAL_API_KEY_FILE")
		require.Contains(t, out.String(), "REDIS_URL")
	}
	cmd := rootCmd()
	cmd.SetArgs([]string{"extra"})
	cmd.SetOut(&bytes.Buffer{})
	require.Error(t, cmd.Execute(), "a stray argument is refused, not ignored")
}
