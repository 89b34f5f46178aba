// Package dial is the one way every paritysync main reaches Redis and Temporal, so
// that the worker, the operator CLI and the tests build their connections alike.
package dial

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/config"
)

// RedisConfig is what REDIS_URL describes: one node, or a cluster.
type RedisConfig struct {
	Node    *redis.Options        // set for one node
	Cluster *redis.ClusterOptions // set for a cluster
}

// ParseRedisURL reads REDIS_URL. Two forms:
//
//	redis://[user:password@]host:port[/db][?options]           one node (rediss:// for TLS)
//	redis://[user:password@]host1:port1,host2:port2,...[?options]  Redis Cluster
//
// A single seed address reaches a cluster with the option cluster=true
// (redis://host:7000?cluster=true); go-redis's own addr=host:port options also mean a
// cluster. A cluster has only database 0. Options are go-redis's URL options
// (dial_timeout, read_timeout, pool_size, ...), all of them in both forms.
func ParseRedisURL(raw string) (RedisConfig, error) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(raw), "://")
	if !ok {
		return RedisConfig{}, fmt.Errorf("REDIS_URL %s: want redis://host:port or redis://host1:port1,host2:port2", MaskRedisURL(raw))
	}
	if scheme != "redis" && scheme != "rediss" {
		return RedisConfig{}, fmt.Errorf("REDIS_URL %s: scheme %q: want redis or rediss", MaskRedisURL(raw), scheme)
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	path, query, _ := strings.Cut(tail, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return RedisConfig{}, fmt.Errorf("REDIS_URL %s: options: %w", MaskRedisURL(raw), config.MaskError(err, raw))
	}
	addrs := strings.Split(hosts, ",")
	cluster := len(addrs) > 1 || q.Has("addr") || q.Get("cluster") == "true"
	q.Del("cluster")
	if !cluster {
		o, err := redis.ParseURL(scheme + "://" + userinfo + hosts + path + encodeQuery(q))
		if err != nil {
			return RedisConfig{}, fmt.Errorf("REDIS_URL %s: %w", MaskRedisURL(raw), config.MaskError(err, raw))
		}
		return RedisConfig{Node: o}, nil
	}
	if p := strings.Trim(path, "/"); p != "" && p != "0" {
		return RedisConfig{}, fmt.Errorf("REDIS_URL %s: database %q: a cluster has only database 0", MaskRedisURL(raw), p)
	}
	for i, a := range addrs {
		if strings.TrimSpace(a) == "" {
			return RedisConfig{}, fmt.Errorf("REDIS_URL %s: address %d is empty", MaskRedisURL(raw), i+1)
		}
		if i > 0 {
			q.Add("addr", strings.TrimSpace(a))
		}
	}
	o, err := redis.ParseClusterURL(scheme + "://" + userinfo + strings.TrimSpace(addrs[0]) + encodeQuery(q))
	if err != nil {
		return RedisConfig{}, fmt.Errorf("REDIS_URL %s: %w", MaskRedisURL(raw), config.MaskError(err, raw))
	}
	return RedisConfig{Cluster: o}, nil
}

// ClusterStateReload is how often a cluster client re-reads the slot map while it
// is in use (one CLUSTER SLOTS in the background). go-redis' default
// is 60 s, and a connection error does not make it look again: after a failover it
// kept sending a promoted replica's slots to the dead master for up to a minute.
const ClusterStateReload = 5 * time.Second

// Client builds the client: a *redis.ClusterClient for a cluster, a *redis.Client
// otherwise. A cluster client re-reads the slot map at once when a node stops
// answering, so a failover costs the election, not the reload interval.
func (c RedisConfig) Client() redis.UniversalClient {
	if c.Cluster != nil {
		o := *c.Cluster
		if o.ClusterStateReloadInterval == 0 {
			o.ClusterStateReloadInterval = ClusterStateReload
		}
		cc := redis.NewClusterClient(&o)
		cc.AddHook(reloadOnNodeLoss{cc})
		return cc
	}
	return redis.NewClient(c.Node)
}

// reloadOnNodeLoss asks the cluster client to re-read the slot map (in the
// background, coalesced) when a command fails without an answer from Redis: a
// refused or broken connection or a timeout, the signs of a master gone.
type reloadOnNodeLoss struct{ cc *redis.ClusterClient }

func (h reloadOnNodeLoss) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNodeLoss) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(ctx, err)
		return err
	}
}

func (h reloadOnNodeLoss) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(ctx, err)
		return err
	}
}

func (h reloadOnNodeLoss) after(ctx context.Context, err error) {
	var answer redis.Error // an error Redis itself answered, redis.Nil included
	if err == nil || errors.As(err, &answer) || errors.Is(err, context.Canceled) {
		return
	}
	h.cc.ReloadState(ctx)
}

func encodeQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// Redis builds the client REDIS_URL describes — a *redis.ClusterClient for a
// cluster, a *redis.Client otherwise — and pings it, so an unreachable Redis is one
// error at start. Errors never carry the password.
func Redis(ctx context.Context, raw string) (redis.UniversalClient, error) {
	cfg, err := ParseRedisURL(raw)
	if err != nil {
		return nil, err
	}
	rdb := cfg.Client()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, &UnreachableError{What: "redis at " + MaskRedisURL(raw), Err: err}
	}
	return rdb, nil
}

// UnreachableError is a dependency that did not answer; the CLI gives it its own
// exit status.
type UnreachableError struct {
	What string
	Err  error
}

func (e *UnreachableError) Error() string { return e.What + " unreachable: " + e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err is an UnreachableError.
func IsUnreachable(err error) bool {
	var ue *UnreachableError
	return errors.As(err, &ue)
}

// MaskRedisURL hides the password of a Redis URL in either form; it is
// config.MaskURL, the one masking of every connection string.
func MaskRedisURL(raw string) string { return config.MaskURL(raw) }

// ForEachMaster calls fn with every master of a cluster, or with the one node of a
// single-node client; a SCAN has to visit each master to see every key. fn runs
// concurrently for a cluster's masters.
func ForEachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, redis.UniversalClient) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	default:
		return fn(ctx, rdb)
	}
}

// ScanKeys returns every key matching pattern on every master.
func ScanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	err := ForEachMaster(ctx, rdb, func(ctx context.Context, node redis.UniversalClient) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		var found []string
		for iter.Next(ctx) {
			found = append(found, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return nil
	})
	return keys, err
}

// quietRedis drops go-redis's own log lines (pool dial retries), which would print
// before the one error a caller reports.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// QuietRedisLogs stops go-redis from writing to stderr; call it once from main.
func QuietRedisLogs() { redis.SetLogger(quietRedis{}) }
