package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// deps are the connections a command needs; each is opened on first use.
type deps struct {
	settings config.Settings
	channels []models.ChannelConfig
	tc       client.Client
	rdb      redis.UniversalClient
	st       *store.Store
	lim      *limiter.Limiter
	// interceptors wrap the Temporal client (the tests count its calls).
	interceptors []interceptor.ClientInterceptor
}

func (c *cli) deps() (*deps, error) {
	s, err := config.LoadSettings(c.getenv)
	if err != nil {
		return nil, configError(err)
	}
	chs, err := config.LoadChannels(s.ChannelsFile, c.getenv)
	if err != nil {
		return nil, configError(err)
	}
	return &deps{settings: s, channels: chs, interceptors: c.interceptors}, nil
}

// conns are the connections a command dials with dial.
type conns uint8

const (
	useLimiter conns = 1 << iota // Redis
	useTemporal
	useStore // PostgreSQL
)

// open reads the configuration and dials need (see dial); the caller closes the
// deps it returns.
func (c *cli) open(ctx context.Context, need conns) (*deps, error) {
	d, err := c.deps()
	if err != nil {
		return nil, err
	}
	if err := d.dial(ctx, need); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// openChannels is open for a command over every configured channel, or the one
// named: a name that is not configured is a usage error before anything is dialled.
func (c *cli) openChannels(ctx context.Context, name string, need conns) (*deps, []string, error) {
	d, err := c.deps()
	if err != nil {
		return nil, nil, err
	}
	slugs, err := d.selectChannels(name)
	if err == nil {
		err = d.dial(ctx, need)
	}
	if err != nil {
		d.close()
		return nil, nil, err
	}
	return d, slugs, nil
}

// dial opens the connections of need, in one order (Redis, Temporal, PostgreSQL)
// so every command names the same one first when several are down; they are
// then d.lim, d.tc and d.st.
func (d *deps) dial(ctx context.Context, need conns) error {
	if need&useLimiter != 0 {
		if _, err := d.limiter(ctx); err != nil {
			return err
		}
	}
	if need&useTemporal != 0 {
		if _, err := d.temporal(ctx); err != nil {
			return err
		}
	}
	if need&useStore != 0 {
		if _, err := d.store(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (d *deps) temporal(ctx context.Context) (client.Client, error) {
	if d.tc != nil {
		return d.tc, nil
	}
	c, err := dial.Temporal(ctx, d.settings, client.Options{Logger: quietLogger{}, Interceptors: d.interceptors})
	if err != nil {
		return nil, dialError(err)
	}
	d.tc = c
	return c, nil
}

func (d *deps) redis(ctx context.Context) (redis.UniversalClient, error) {
	if d.rdb != nil {
		return d.rdb, nil
	}
	rdb, err := dial.Redis(ctx, d.settings.RedisURL)
	if err != nil {
		return nil, dialError(err)
	}
	d.rdb = rdb
	return rdb, nil
}

// dialError is err from dialling a service: one that did not answer stays as it
// is (exit 69); any other is the configuration's (exit 78).
func dialError(err error) error {
	if dial.IsUnreachable(err) {
		return err
	}
	return configError(err)
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
		return nil, &dial.UnreachableError{What: "postgres at " + config.MaskURL(d.settings.DatabaseURL), Err: err}
	}
	d.st = st
	return st, nil
}

func (d *deps) limiter(ctx context.Context) (*limiter.Limiter, error) {
	if d.lim != nil {
		return d.lim, nil
	}
	rdb, err := d.redis(ctx)
	if err != nil {
		return nil, err
	}
	d.lim = limiter.New(rdb, d.channels, limiter.Options{Prefix: d.settings.KeyPrefix, Zones: d.settings.Zones})
	return d.lim, nil
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
	return ops.WorkflowLink(d.settings, workflowID)
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
		return nil, usageError(fmt.Sprintf("--channel %q: not a configured channel", name))
	}
	return slugs, nil
}

func (d *deps) channel(slug string) (models.ChannelConfig, bool) {
	for _, c := range d.channels {
		if c.Slug == slug {
			return c, true
		}
	}
	return models.ChannelConfig{}, false
}

// quietLogger keeps the SDK's connection chatter off an operator's terminal.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// withStoredCodes is v checking ms against the Channex ids stored over the API
// (PUT /v1/properties/{id}/channels) laid over the channel file's, as intake and
// the workers check them; the store is opened only when a mutation of ms is on a
// Channex channel whose file does not map its property.
func (d *deps) withStoredCodes(ctx context.Context, v *models.Validator, ms []models.Mutation) (*models.Validator, error) {
	need := false
	for _, m := range ms {
		cfg, ok := v.Channels[m.Channel]
		if _, mapped := cfg.Channex.Properties[m.PropertyID]; ok && cfg.Protocol == models.ProtocolChannex && !mapped {
			need = true
			break
		}
	}
	if !need {
		return v, nil
	}
	st, err := d.store(ctx)
	if err != nil {
		return nil, err
	}
	return st.NewMappings(d.channels, 0).ValidatorFor(ctx, v, ms)
}
