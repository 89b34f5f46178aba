package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// deps are the connections a command needs; each is opened on first use.
type deps struct {
	settings models.Settings
	channels []models.ChannelConfig
	tc       client.Client
	rdb      *redis.Client
	st       *store.Store
}

func loadDeps(getenv func(string) string) (*deps, error) {
	s, err := models.LoadSettings(getenv)
	if err != nil {
		return nil, err
	}
	chs, err := models.LoadChannels(s.ChannelsFile, getenv)
	if err != nil {
		return nil, err
	}
	return &deps{settings: s, channels: chs}, nil
}

func (d *deps) temporal(ctx context.Context) (client.Client, error) {
	if d.tc != nil {
		return d.tc, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: d.settings.TemporalAddress,
		Namespace: d.settings.TemporalNamespace, Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("temporal at %s unreachable: %w", d.settings.TemporalAddress, err)
	}
	d.tc = c
	return c, nil
}

func (d *deps) redis(ctx context.Context) (*redis.Client, error) {
	if d.rdb != nil {
		return d.rdb, nil
	}
	opt, err := redis.ParseURL(d.settings.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL %s: %w", models.MaskURL(d.settings.RedisURL), err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s unreachable: %w", models.MaskURL(d.settings.RedisURL), err)
	}
	d.rdb = rdb
	return rdb, nil
}

// store opens the system of record (PARITYSYNC_DATABASE_URL). The worker applies
// the migrations; a command run before any worker started finds no tables and says
// so.
func (d *deps) store(ctx context.Context) (*store.Store, error) {
	if d.st != nil {
		return d.st, nil
	}
	st, err := store.Open(ctx, d.settings.DatabaseURL)
	if err != nil {
		return nil, err
	}
	d.st = st
	return st, nil
}

func (d *deps) limiter(ctx context.Context) (*limiter.Limiter, error) {
	rdb, err := d.redis(ctx)
	if err != nil {
		return nil, err
	}
	return limiter.New(rdb, d.channels, limiter.Options{Prefix: d.settings.KeyPrefix}), nil
}

func (d *deps) close() {
	if d.tc != nil {
		d.tc.Close()
	}
	if d.rdb != nil {
		_ = d.rdb.Close()
	}
	if d.st != nil {
		d.st.Close()
	}
}

// uiLink is where the Temporal UI shows a workflow.
func (d *deps) uiLink(workflowID string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", d.settings.TemporalUI,
		url.PathEscape(d.settings.TemporalNamespace), url.PathEscape(workflowID))
}

// selectChannels is every configured channel, or just the named one.
func (d *deps) selectChannels(name string) ([]string, error) {
	var slugs []string
	for _, c := range d.channels {
		if name == "" || c.Slug == name {
			slugs = append(slugs, c.Slug)
		}
	}
	if len(slugs) == 0 {
		return nil, fmt.Errorf("channel %q is not configured", name)
	}
	return slugs, nil
}

func (d *deps) hasChannel(slug string) bool {
	for _, c := range d.channels {
		if c.Slug == slug {
			return true
		}
	}
	return false
}

// parseFlags parses fs and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("%s: %v", fs.Name(), err)}
	}
	return nil
}

// quietLogger keeps the SDK's connection chatter off an operator's terminal.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
