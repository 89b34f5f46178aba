package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

func testRedisURL() string { return redistest.URL() }

// quotaEnv is an environment with its own key prefix and a daily quota of 100 on
// expedia and agoda, so usage maps to percent.
func quotaEnv(t *testing.T, redisURL string) (map[string]string, string) {
	prefix := "paritysync-test:" + t.Name() + ":" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	return map[string]string{
		"REDIS_URL": redisURL, "PARITYSYNC_KEY_PREFIX": prefix,
		"PARITYSYNC_CHANNEL_EXPEDIA_DAILY_QUOTA": "100", "PARITYSYNC_CHANNEL_AGODA_DAILY_QUOTA": "100",
	}, prefix
}

// setDailyUsed writes a channel's daily counter where the limiter keeps it
// (limiter/doc.go: <prefix>{<channel>}:daily).
func setDailyUsed(t *testing.T, rdb redis.UniversalClient, prefix, channel string, used int) {
	t.Helper()
	require.NoError(t, rdb.Set(context.Background(), prefix+"{"+channel+"}:daily", used, time.Hour).Err())
}

// cleanPrefix deletes the test's keys when it ends, then closes rdb.
func cleanPrefix(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := dial.ScanKeys(ctx, rdb, prefix+"*")
		for _, k := range keys {
			rdb.Del(ctx, k)
		}
		_ = rdb.Close()
	})
}

// quotaRedis is a Redis client and an environment of quotaEnv on it; the
// environment's keys are deleted when the test ends.
func quotaRedis(t *testing.T) (redis.UniversalClient, map[string]string, string) {
	rdb, err := dial.Redis(context.Background(), redistest.Reachable(t))
	require.NoError(t, err)
	env, prefix := quotaEnv(t, testRedisURL())
	cleanPrefix(t, rdb, prefix)
	return rdb, env, prefix
}

func TestQuotaExitStatusIsTheTier(t *testing.T) {
	rdb, env, prefix := quotaRedis(t)

	for _, tc := range []struct {
		used int
		tier limiter.Tier
		code int
	}{
		{0, limiter.TierOK, 0}, {69, limiter.TierOK, 0}, {70, limiter.TierWarn, 1}, {85, limiter.TierPage, 2},
		{95, limiter.TierThrottle, 3}, {100, limiter.TierStop, 3},
	} {
		setDailyUsed(t, rdb, prefix, "expedia", tc.used)
		code, out, errOut := runCLI(t, env, "quota", "--channel", "expedia", "--output", "json")
		require.Equal(t, tc.code, code, "%d %% used: %s", tc.used, errOut)
		var res struct {
			Channels []quotaRow   `json:"channels"`
			Worst    limiter.Tier `json:"worst_tier"`
			Exit     int          `json:"exit_status"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		require.Len(t, res.Channels, 1)
		require.Equal(t, tc.tier, res.Channels[0].Tier)
		require.Equal(t, tc.used, res.Channels[0].DailyUsed)
		require.Equal(t, tc.code, res.Exit)

		code, out, _ = runCLI(t, env, "quota", "--channel", "expedia")
		require.Equal(t, tc.code, code, "table output exits alike")
		require.Contains(t, out, string(tc.tier))
	}

	// Without --channel the status is the worst channel's.
	setDailyUsed(t, rdb, prefix, "expedia", 72)
	setDailyUsed(t, rdb, prefix, "agoda", 90)
	code, _, _ := runCLI(t, env, "quota")
	require.Equal(t, exitPage, code, "agoda pages, expedia only warns")
	code, _, _ = runCLI(t, env, "quota", "--channel", "expedia")
	require.Equal(t, exitWarn, code)

	// A failure is never mistaken for a tier.
	env["REDIS_URL"] = "redis://127.0.0.1:1/0?dial_timeout=200ms"
	code, _, _ = runCLI(t, env, "quota")
	require.Greater(t, code, exitThrottle)
	code, _, _ = runCLI(t, map[string]string{"REDIS_URL": testRedisURL()}, "quota", "--channel", "nosuch")
	require.Equal(t, exitUsage, code)
}

func TestQuotaShowsThePerPropertyWindowLimit(t *testing.T) {
	_, env, _ := quotaRedis(t)
	env["PARITYSYNC_CHANNELS_FILE"] = writeFile(t, "channels:\n  - slug: perprop\n    rate_per_minute: 10\n    burst: 2\n    scope: property\n")

	code, out, errOut := runCLI(t, env, "quota", "--channel", "perprop", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var res struct {
		Channels []quotaRow `json:"channels"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Channels, 1)
	require.Equal(t, 10, res.Channels[0].WindowLimit, "each property's window allows 10, not 0")
	require.Equal(t, "property", string(res.Channels[0].Scope))

	code, out, errOut = runCLI(t, env, "quota", "--channel", "perprop")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "10/property")

	code, out, _ = runCLI(t, env, "quota", "--channel", "expedia", "-o", "json")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `"scope": "channel"`)
	require.Contains(t, out, `"window_limit": 60`, "a channel-wide window shows the limit in force")
}

// A family the channel stopped with quota_exhausted shows as a "stopped:" line and
// in the JSON, and the exit status is the stop's, though the day's quota is not spent.
func TestQuotaShowsAStoppedFamilyAndExitsAsAStop(t *testing.T) {
	ctx := context.Background()
	rdb, env, prefix := quotaRedis(t)
	lim := limiter.New(rdb, models.DefaultChannels(), limiter.Options{Prefix: prefix})
	require.NoError(t, lim.StopFamily(ctx, "expedia", models.FamilyRates, time.Hour))

	code, out, errOut := runCLI(t, env, "quota", "--channel", "expedia")
	require.Equal(t, exitThrottle, code, errOut)
	require.Contains(t, out, "stopped: expedia rates until ")
	require.NotContains(t, out, "availability until")

	code, out, errOut = runCLI(t, env, "quota", "--channel", "expedia", "-o", "json")
	require.Equal(t, exitThrottle, code, errOut)
	var res struct {
		Channels []quotaRow   `json:"channels"`
		Worst    limiter.Tier `json:"worst_tier"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Channels, 1)
	require.Equal(t, limiter.TierOK, res.Channels[0].Tier, "the day's quota is not spent")
	require.Equal(t, limiter.TierStop, res.Worst)
	require.Len(t, res.Channels[0].Stopped, 1)
	stop := res.Channels[0].Stopped[0]
	require.Equal(t, models.FamilyRates, stop.Family)
	require.InDelta(t, time.Hour.Seconds(), stop.ForSeconds, 5)
	require.WithinDuration(t, time.Now().Add(time.Hour), stop.Until, 5*time.Second)

	// Another channel is not affected.
	code, _, errOut = runCLI(t, env, "quota", "--channel", "agoda")
	require.Equal(t, exitOK, code, errOut)
}

// A 429 on a per-property channel backs off only that property's window: quota
// shows it as a "backed off:" line and in the JSON (count and list), the channel's
// own back-off column stays 0, and the exit status stays the tier's (a back-off
// is not a quota stop).
func TestQuotaShowsPropertyBackoffs(t *testing.T) {
	ctx := context.Background()
	rdb, env, prefix := quotaRedis(t)
	env["PARITYSYNC_CHANNEL_EXPEDIA_SCOPE"] = "property"
	chs, err := config.LoadChannels("", func(k string) string { return env[k] })
	require.NoError(t, err)
	lim := limiter.New(rdb, chs, limiter.Options{Prefix: prefix})
	require.NoError(t, lim.BackoffScope(ctx, "expedia", "prop_00000007", models.FamilyAvailability, time.Minute))

	code, out, errOut := runCLI(t, env, "quota", "--channel", "expedia")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "backed off: expedia 1 properties after a 429 (its other properties go on): prop_00000007/availability ")

	code, out, errOut = runCLI(t, env, "quota", "--channel", "expedia", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var res struct {
		Channels []quotaRow `json:"channels"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Channels, 1)
	r := res.Channels[0]
	require.Zero(t, r.BackoffSeconds, "the channel itself is not backed off")
	require.Equal(t, 1, r.BackedOff)
	require.Len(t, r.PropertyBackoffs, 1)
	b := r.PropertyBackoffs[0]
	require.Equal(t, "prop_00000007", b.Property)
	require.Equal(t, string(models.FamilyAvailability), b.Window)
	require.InDelta(t, time.Minute.Seconds(), b.ForSeconds, 5)
	require.WithinDuration(t, time.Now().Add(time.Minute), b.Until, 5*time.Second)
}
