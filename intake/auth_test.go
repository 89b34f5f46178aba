package main

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKeysFileReloadTakesEffectWithoutRestart adds a tenant's line to the keys file
// of a running server (the new key then works) and removes acme's (its key is then
// answered 401), every answer checked against openapi.yaml.
func TestKeysFileReloadTakesEffectWithoutRestart(t *testing.T) {
	c := loadContract(t)
	path := writeKeys(t)
	h := serverWith(t, path, nil, "").Handler()
	// An authenticated caller asking for another tenant's batch gets 404; without a
	// valid key, 401. Neither needs Temporal.
	status := func(key string) int {
		return c.do(t, h, requestAs(key, http.MethodGet, "/v1/batches/other.batch", ""), true).StatusCode
	}
	const gammaKey = "test-key-gamma"
	require.Equal(t, http.StatusNotFound, status(testKey))
	require.Equal(t, http.StatusUnauthorized, status(gammaKey), "gamma is not in the file yet")

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(keyLine("gamma", gammaKey, ""))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Eventually(t, func() bool { return status(gammaKey) == http.StatusNotFound },
		3*time.Second, 100*time.Millisecond, "the new tenant's key works without a restart")

	body, err := os.ReadFile(path)
	require.NoError(t, err)
	var kept []string
	for _, line := range strings.SplitAfter(string(body), "\n") {
		if !strings.HasPrefix(line, "acme:") {
			kept = append(kept, line)
		}
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(kept, "")), 0o600))
	require.Eventually(t, func() bool { return status(testKey) == http.StatusUnauthorized },
		3*time.Second, 100*time.Millisecond, "the removed key is refused without a restart")
	require.Equal(t, http.StatusNotFound, status(gammaKey), "the other keys stay")
}

// TestKeysFileRoleIsAdminOrAbsent checks the optional third field of a line.
func TestKeysFileRoleIsAdminOrAbsent(t *testing.T) {
	keys, err := parseKeys([]byte(keyLine("acme", testKey, roleAdmin) + keyLine("beta", betaKey, "")))
	require.NoError(t, err)
	require.True(t, keys[0].admin)
	require.False(t, keys[1].admin)
	_, err = parseKeys([]byte(keyLine("acme", testKey, "root")))
	require.ErrorContains(t, err, `line 1: the role, when given, must be "admin"`)
}

// TestTenantKeysCannotPauseResumeOrReadAndReplayTheDLQ sends the operations that
// act on every tenant's work with a plain tenant key: each is a 403 problem, and
// nothing is done (the server has no Temporal client or store to do it with).
func TestTenantKeysCannotPauseResumeOrReadAndReplayTheDLQ(t *testing.T) {
	c := loadContract(t)
	h := offlineServer(t).Handler()
	for _, r := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/channels/agoda/pause", `{"reason":"maintenance"}`},
		{http.MethodPost, "/v1/channels/agoda/resume", ""},
		{http.MethodGet, "/v1/dlq", ""},
		{http.MethodPost, "/v1/dlq/replay", `{"channel":"agoda"}`},
	} {
		resp := c.do(t, h, requestAs(betaKey, r.method, r.path, r.body), true)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", r.method, r.path)
		require.Equal(t, problemBase+probForbidden, decodeProblem(t, resp).Type)
	}
}
