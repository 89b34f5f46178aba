package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// startCluster starts three redis-server masters with cluster mode on free loopback
// ports, joins them with redis-cli --cluster create, and returns the cluster form of
// REDIS_URL. Everything stops and is removed when the test ends.
func startCluster(t *testing.T) (redisURL string, ports []int) {
	t.Helper()
	c := redistest.Start(t, redistest.Options{Masters: 3})
	return c.URL, c.Ports
}

// noMoved fails the test on any error that is a Redis Cluster redirection.
func noMoved(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && (strings.Contains(err.Error(), "MOVED") || strings.Contains(err.Error(), "ASK ")) {
		t.Fatalf("%s: cluster redirection leaked: %v", what, err)
	}
	require.NoError(t, err, what)
}

// TestRedisCluster runs paritysync's Redis traffic through a real three-master Redis
// Cluster: a batch prepared and committed to the ledger, limiter decisions, the
// quota and dead-letter commands, and the ledger scan across masters. A MOVED error
// anywhere fails it.
func TestRedisCluster(t *testing.T) {
	redisURL, ports := startCluster(t)
	ctx := context.Background()
	rdb, err := dial.Redis(ctx, redisURL)
	require.NoError(t, err)
	defer rdb.Close()
	require.IsType(t, &redis.ClusterClient{}, rdb, "several addresses build a cluster client")

	prefix := "paritysync-test:cluster:"
	channels := models.DefaultChannels()
	// Add a channel on each master the default channels leave empty, so every
	// master holds a channel's limiter, ledger and dead-letter keys.
	cc := rdb.(*redis.ClusterClient)
	used := map[string]bool{}
	for _, c := range channels {
		node, err := cc.MasterForKey(ctx, prefix+"{"+c.Slug+"}:daily")
		noMoved(t, "master for key", err)
		used[node.Options().Addr] = true
	}
	for i := 0; len(used) < len(ports) && i < 1000; i++ {
		slug := "ota" + strconv.Itoa(i)
		node, err := cc.MasterForKey(ctx, prefix+"{"+slug+"}:daily")
		noMoved(t, "master for key", err)
		if !used[node.Options().Addr] {
			used[node.Options().Addr] = true
			channels = append(channels, models.NewChannelConfig(slug, 60))
		}
	}
	require.Len(t, used, len(ports), "a channel on every master")
	var extra strings.Builder
	extra.WriteString("channels:\n")
	for _, c := range channels[len(models.DefaultChannels()):] {
		extra.WriteString("  - slug: " + c.Slug + "\n    rate_per_minute: 60\n")
	}
	channelsFile := filepath.Join(t.TempDir(), "channels.yaml")
	require.NoError(t, os.WriteFile(channelsFile, []byte(extra.String()), 0o600))
	masters := map[string]string{}
	for _, c := range channels {
		slot, err := rdb.ClusterKeySlot(ctx, prefix+"{"+c.Slug+"}:daily").Result()
		noMoved(t, "CLUSTER KEYSLOT", err)
		node, err := rdb.(*redis.ClusterClient).MasterForKey(ctx, prefix+"{"+c.Slug+"}:daily")
		noMoved(t, "master for key", err)
		masters[c.Slug] = node.Options().Addr
		t.Logf("channel %-12s slot %5d on %s", c.Slug, slot, node.Options().Addr)
	}

	// The negative control: a single-node client on one master is redirected for a
	// channel that lives on another, which is what the cluster client must avoid.
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(ports[0])})
	defer single.Close()
	movedSeen := false
	for _, c := range channels {
		if err := single.Get(ctx, prefix+"{"+c.Slug+"}:daily").Err(); err != nil && strings.Contains(err.Error(), "MOVED") {
			movedSeen = true
		}
	}
	require.True(t, movedSeen || len(uniq(masters)) == 1, "a single-node client sees MOVED on another master's channel")

	// What lives in Redis is the limiter's: the batch, ledger and dead letters live
	// in PostgreSQL. Every script runs on the master of its channel's slot.
	now := time.Now()
	// Limiter decisions on every channel: a full burst goes now, the rest hold slots,
	// and the ordering gate and its lease run on the channel's master too.
	lim := limiter.New(rdb, channels, limiter.Options{Prefix: prefix})
	granted := map[string]int{}
	for _, c := range channels {
		for i := range 3 * c.Burst {
			r := limiter.Request{Channel: c.Slug, Family: models.FamilyRates, Priority: 3, Cost: 1,
				Property: "prop_0000aaaa", ID: fmt.Sprintf("cluster/%s/%d", c.Slug, i),
				Lines: []models.ARILine{{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: models.DateOf(now).AddDays(i),
					To: models.DateOf(now).AddDays(i), Version: 1}}}
			d, err := lim.Reserve(ctx, r)
			noMoved(t, "limiter decision on "+c.Slug, err)
			if d.State == limiter.Send {
				granted[c.Slug]++
				noMoved(t, "lease release on "+c.Slug, lim.Release(ctx, r))
			}
		}
		require.Positive(t, granted[c.Slug], c.Slug)
		require.LessOrEqual(t, granted[c.Slug], c.Burst, "%s: at most the burst back to back", c.Slug)
	}
	t.Logf("limiter: sent now of 3×burst asks per channel %v", granted)

	// The circuit breaker's state lives beside the rest, on every master too.
	for _, c := range channels {
		_, _, err := lim.Outcome(ctx, c.Slug, false)
		noMoved(t, "breaker outcome on "+c.Slug, err)
	}
	cliEnv := map[string]string{"REDIS_URL": redisURL, "PARITYSYNC_KEY_PREFIX": prefix, "PARITYSYNC_CHANNELS_FILE": channelsFile}
	// quota through the CLI, with a tier per channel.
	cliEnv["PARITYSYNC_CHANNEL_EXPEDIA_DAILY_QUOTA"] = "100"
	require.NoError(t, rdb.Set(ctx, prefix+"{expedia}:daily", 90, time.Hour).Err())
	code, out, errOut := runCLI(t, cliEnv, "quota", "--output", "json")
	require.NotContains(t, errOut, "MOVED")
	require.Equal(t, exitPage, code, "expedia at 90 %% pages: %s", errOut)
	var q struct {
		Channels []quotaRow `json:"channels"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &q))
	require.Len(t, q.Channels, len(channels))
	for _, r := range q.Channels {
		if r.Channel != "expedia" {
			require.Equal(t, granted[r.Channel], r.DailyUsed, "%s: the quota counts the granted decisions", r.Channel)
		}
		require.Equal(t, 1, r.Failures, "%s: the breaker's streak is read from its master", r.Channel)
	}
	t.Logf("quota: %s", strings.Join(quotaSummary(q.Channels), ", "))
}

func uniq(m map[string]string) map[string]bool {
	u := map[string]bool{}
	for _, v := range m {
		u[v] = true
	}
	return u
}

func quotaSummary(rows []quotaRow) []string {
	var s []string
	for _, r := range rows {
		s = append(s, fmt.Sprintf("%s %d/%d %s", r.Channel, r.DailyUsed, r.DailyLimit, r.Tier))
	}
	return s
}
