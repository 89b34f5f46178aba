package limiter

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Client is what the limiter needs of a go-redis client: scripts (EVALSHA) and the
// library's functions (FCALL). *redis.Client, *redis.ClusterClient and
// redis.UniversalClient have both.
type Client interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
	FunctionLoad(ctx context.Context, code string) *redis.StringCmd
}

// The decision runs as a function of a library (FUNCTION LOAD, FCALL) rather than a
// script: a script's top level runs on every call, and reserve's made its two dozen
// helpers and its constant tables anew each time; a library makes them once, when
// the server loads it. The library's name and its functions' carry a hash of its
// code, so that workers of two releases, side by side during a deploy, each call
// their own. A server that does not have it (new, restarted empty, flushed) answers
// "Function not found", and the call loads it and tries once more.
var (
	library     = newLibrary()
	reserveFunc = "reserve_" + library.hash
)

type lib struct {
	hash string
	code string
}

func newLibrary() lib {
	own, err := luaFS.ReadFile("lua/reserve.lua")
	if err != nil {
		panic(err)
	}
	src := preludeLua + gateLua + string(own)
	sum := sha1.Sum([]byte(src))
	h := hex.EncodeToString(sum[:8])
	return lib{hash: h, code: "#!lua name=paritysync_" + h + "\n" + src +
		"\nredis.register_function('reserve_" + h + "', reserve)\n"}
}

// fcall runs fn of the library, loading the library first where the server does
// not have it. While a pipeline records its calls (recorder), loading is the
// pipeline's (send).
func (l *Limiter) fcall(ctx context.Context, fn string, keys []string, args ...any) *redis.Cmd {
	c := l.rdb.FCall(ctx, fn, keys, args...)
	if _, rec := l.rdb.(*recorder); rec || !noFunction(c.Err()) {
		return c
	}
	if err := loadLibrary(ctx, l.rdb); err != nil {
		return redis.NewCmdResult(nil, err)
	}
	return l.rdb.FCall(ctx, fn, keys, args...)
}

// loadLibrary loads the library on every master of a cluster, or on the one server.
// A replica has it from its master, and keeps it when promoted.
func loadLibrary(ctx context.Context, rdb Client) error {
	load := func(ctx context.Context, c Client) error {
		// A library of this name is this code (its hash is in the name): one a
		// server already has is left as it is, uncompiled.
		err := c.FunctionLoad(ctx, library.code).Err()
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("load limiter library: %w", err)
		}
		return nil
	}
	if cl, ok := rdb.(interface {
		ForEachMaster(context.Context, func(context.Context, *redis.Client) error) error
	}); ok {
		return cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return load(ctx, m) })
	}
	return load(ctx, rdb)
}

// noFunction reports whether the server did not have the library's function.
func noFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}
