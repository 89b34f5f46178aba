package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/dial/testenv"
)

// DefaultURL is the local Redis the tests use when REDIS_URL is unset.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL is REDIS_URL, or DefaultURL.
func URL() string {
	if u := strings.TrimSpace(os.Getenv("REDIS_URL")); u != "" {
		return u
	}
	return DefaultURL
}

// Reachable returns URL() after a PING has answered on its first address; when it
// does not, the test fails under PARITYSYNC_TEST_REQUIRE and skips otherwise,
// naming Redis and its address. Tests that build their own client (a worker stack,
// dial.Redis) start with it.
func Reachable(tb testing.TB) string {
	tb.Helper()
	url := URL()
	first := url
	if h := hostOf(url); strings.Contains(h, ",") {
		// A cluster URL: its first seed answers for the reachability check.
		first = strings.Replace(url, h, strings.Split(h, ",")[0], 1)
	}
	rdb, err := connect(first)
	if err != nil {
		testenv.Unavailable(tb, "Redis at "+hostOf(url)+" not reachable (REDIS_URL)", err)
	}
	_ = rdb.Close()
	return url
}

// Client connects to the Redis at URL() (one node) and returns it with a key
// prefix of the test's own, label:<random>:, whose keys are deleted and whose
// client is closed when the test ends. A Redis that does not answer fails the test
// under PARITYSYNC_TEST_REQUIRE and skips it otherwise.
func Client(tb testing.TB, label string) (*redis.Client, string) {
	tb.Helper()
	url := URL()
	rdb, err := connect(url)
	if err != nil {
		testenv.Unavailable(tb, "Redis at "+hostOf(url)+" not reachable (REDIS_URL)", err)
	}
	prefix := label + ":" + randomHex() + ":"
	tb.Cleanup(func() {
		Clean(tb, rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

// Clean deletes every key under prefix (on one node, or on every master of a
// cluster).
func Clean(tb testing.TB, rdb redis.UniversalClient, prefix string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			// One key per DEL: a cluster refuses keys of several slots in one call.
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.Client:
		err = del(ctx, c)
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	}
	if err != nil {
		tb.Errorf("delete test keys %s*: %v", prefix, err)
	}
}

// unreachable remembers the URLs that did not answer, so that a package of tests
// without Redis skips each test at once instead of dialling again.
var unreachable sync.Map // url -> error

// connect is a client of the one-node URL that has answered a PING.
func connect(url string) (*redis.Client, error) {
	if err, ok := unreachable.Load(url); ok {
		return nil, err.(error)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		unreachable.Store(url, err)
		return nil, err
	}
	return rdb, nil
}

// hostOf is the address part of a Redis URL, without credentials.
func hostOf(url string) string {
	_, rest, _ := strings.Cut(url, "://")
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return rest
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
