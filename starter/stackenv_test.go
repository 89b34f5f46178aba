package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/config"
)

// TestStackEnvIsWhatTheStarterNeeds runs `scripts/stack.sh env` (what `make up`
// writes and prints; its state in a directory of the test's own), sources the env
// file in a fresh shell and loads the starter's
// configuration from it: the stack's database, Redis, Temporal and channels, with
// each credential file where the stack keeps it and no secret in the file.
func TestStackEnvIsWhatTheStarterNeeds(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	bin, runDir := t.TempDir(), t.TempDir()
	cmd := exec.Command(bash, "scripts/stack.sh", "env")
	cmd.Dir = repo
	// The stack's own defaults, not whatever this test runs with.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "PARITYSYNC_BIN=" + bin,
		"PARITYSYNC_RUN_DIR=" + runDir}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "source "+runDir+"/env")
	require.Contains(t, string(out), "export PARITYSYNC_DATABASE_URL=")

	dump := exec.Command(bash, "-c", `source "$0" && env`, filepath.Join(runDir, "env"))
	dump.Dir = repo
	dump.Env = []string{"PATH=/usr/bin:/bin"}
	envOut, err := dump.Output()
	require.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(string(envOut), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	require.True(t, strings.HasPrefix(env["PATH"], bin+":"), "the stack's binaries first on PATH: %s", env["PATH"])

	getenv := func(k string) string { return env[k] }
	s, err := config.LoadSettings(getenv)
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/paritysync_stack?sslmode=disable", s.DatabaseURL,
		"the database make up creates, not the starter's default")
	require.Equal(t, "127.0.0.1:7233", s.TemporalAddress)
	require.Equal(t, "redis://127.0.0.1:6379/0", s.RedisURL)
	chs, err := config.LoadChannels(s.ChannelsFile, getenv)
	require.NoError(t, err, "the demo channels load, with their credential files")
	slugs := map[string]bool{}
	for _, c := range chs {
		slugs[c.Slug] = true
	}
	require.True(t, slugs["channex_demo"] && slugs["ota_demo"], "the stack's channels: %v", slugs)
	for _, k := range []string{"PARITYSYNC_TOKEN_FILE", "PARITYSYNC_CHANNEL_CHANNEX_DEMO_CREDENTIALS_FILE"} {
		require.True(t, filepath.IsAbs(env[k]), "%s is absolute, so any directory works: %s", k, env[k])
		secret, err := os.ReadFile(env[k])
		require.NoError(t, err)
		raw, err := os.ReadFile(filepath.Join(runDir, "env"))
		require.NoError(t, err)
		require.NotContains(t, string(raw), strings.TrimSpace(string(secret)), "the env file names the file, never the secret")
	}
}
