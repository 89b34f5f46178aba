package redistest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Memory sums MEMORY USAGE of every key under prefix, in total and by kind: the
// name after the channel's hash tag (gate, sched, res, lease, …), or the first name
// under the prefix for a key without a tag.
func Memory(tb testing.TB, rdb redis.UniversalClient, prefix string) (int64, Kinds) {
	tb.Helper()
	ctx := context.Background()
	byKind := Kinds{}
	var total int64
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err == redis.Nil {
			continue // expired meanwhile
		}
		if err != nil {
			tb.Fatalf("MEMORY USAGE %s: %v", k, err)
		}
		kind := k[len(prefix):]
		if i := strings.IndexByte(kind, '}'); i >= 0 && i+1 < len(kind) {
			kind = strings.TrimPrefix(kind[i+1:], ":")
		}
		kind, _, _ = strings.Cut(kind, ":")
		byKind[kind] += n
		total += n
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	return total, byKind
}

// Kinds is bytes by kind of key, as Memory sums them.
type Kinds map[string]int64

// String lists the kinds in name order: "gate=520 sched=88".
func (m Kinds) String() string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
