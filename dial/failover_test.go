package dial_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/dial/redistest"
)

// A master killed with kill -9: its replica is promoted after the node timeout, and
// the client must follow within the election and one re-read of the slot map, not
// go-redis' 60 s reload interval (which it took before: every write to the
// promoted slots went to the dead master until then).
func TestClusterClientFollowsAFailoverAtOnce(t *testing.T) {
	c := redistest.Start(t, redistest.Options{Masters: 3, Replicas: 1, NodeTimeout: 2 * time.Second})
	ctx := context.Background()
	rdb, err := dial.Redis(ctx, c.URL)
	require.NoError(t, err)
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	require.True(t, ok, "a cluster URL gives a cluster client")

	const key = "{failover-test}:k"
	require.NoError(t, rdb.Set(ctx, key, "before", 0).Err())
	master, err := cc.MasterForKey(ctx, key)
	require.NoError(t, err)
	addr := master.Options().Addr
	port, err := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	require.NoError(t, err)

	killed := time.Now()
	c.Kill(port)
	var lastErr error
	for time.Since(killed) < 40*time.Second {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		lastErr = rdb.Set(cctx, key, "after", 0).Err()
		cancel()
		if lastErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(killed)
	require.NoError(t, lastErr, "no write reached the promoted replica within 40 s of the kill")
	t.Logf("writes reach the promoted replica %s after the master was killed (node timeout 2 s)", took.Round(100*time.Millisecond))
	// The election takes about twice the node timeout; the slot map is re-read on
	// the first failed write after it, or at the latest every dial.ClusterStateReload.
	require.Less(t, took, 4*time.Second+dial.ClusterStateReload+5*time.Second,
		"the client kept the dead master's slots")
	require.Equal(t, "after", rdb.Get(ctx, key).Val())
}
