package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/paritysync/paritysync/models"
)

// PropertyChannel is one channel a property is on, with its codes there: Channex
// ids (nil: the worker's YAML), or an OpenTravel channel's codes (nil: our own).
type PropertyChannel struct {
	Channel    string
	Channex    *models.ChannexProperty
	OpenTravel *models.OpenTravelProperty
}

// storedCodes is property_channels.codes: one of the two.
type storedCodes struct {
	Channex    *models.ChannexProperty    `json:"channex,omitempty"`
	OpenTravel *models.OpenTravelProperty `json:"opentravel,omitempty"`
}

// SetPropertyChannels makes channels (slugs) the whole list of channels property
// is on, without codes, in one transaction; an empty list unmaps it.
func (s *Store) SetPropertyChannels(ctx context.Context, property string, channels []string) error {
	list := make([]PropertyChannel, len(channels))
	for i, ch := range channels {
		list[i] = PropertyChannel{Channel: ch}
	}
	return s.SetPropertyMappings(ctx, property, list)
}

// SetPropertyMappings makes list the whole of property's channels and codes, in one
// transaction that also moves mapping_version, so every cache (Mappings) reloads
// at its next check; an empty list unmaps the property.
func (s *Store) SetPropertyMappings(ctx context.Context, property string, list []PropertyChannel) error {
	slugs := make([]string, len(list))
	for i, pc := range list {
		slugs[i] = pc.Channel
	}
	ids, err := s.channelIDs(ctx, slugs...)
	if err != nil {
		return fmt.Errorf("map property %s: %w", property, err)
	}
	chIDs := make([]int16, len(list))
	codes := make([]pgtype.Text, len(list))
	for i, pc := range list {
		chIDs[i] = ids[pc.Channel]
		if pc.Channex != nil || pc.OpenTravel != nil {
			b, err := json.Marshal(storedCodes{Channex: pc.Channex, OpenTravel: pc.OpenTravel})
			if err != nil {
				return fmt.Errorf("map property %s: %w", property, err)
			}
			codes[i] = pgtype.Text{String: string(b), Valid: true}
		}
	}
	now := s.now()
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM property_channels WHERE property_id = $1 AND NOT channel = ANY($2)`,
			property, chIDs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO property_channels (property_id, channel, updated_at, codes)
SELECT $1, c, $3, k FROM unnest($2::smallint[], $4::text[]::jsonb[]) AS u(c, k)
ON CONFLICT (property_id, channel) DO UPDATE SET codes = excluded.codes,
	updated_at = CASE WHEN property_channels.codes IS NOT DISTINCT FROM excluded.codes
		THEN property_channels.updated_at ELSE excluded.updated_at END`, property, chIDs, now, codes); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE mapping_version SET version = version + 1`)
		return err
	})
	if err != nil {
		return fmt.Errorf("map property %s: %w", property, err)
	}
	return nil
}

// PropertyChannels is, per property of properties, the channels it is on, sorted;
// a property on none is absent. One statement on the primary key.
func (s *Store) PropertyChannels(ctx context.Context, properties []string) (map[string][]string, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT p.property_id, ch.slug FROM property_channels p JOIN channels ch ON ch.id = p.channel
WHERE p.property_id = ANY($1)`, properties)
	out := map[string][]string{}
	var prop, slug string
	if _, err := pgx.ForEachRow(rows, []any{&prop, &slug}, func() error {
		out[prop] = append(out[prop], slug)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("channels of properties: %w", err)
	}
	for _, l := range out {
		slices.Sort(l)
	}
	return out, nil
}

// PropertyMappings is property's channels with their codes, sorted by channel.
func (s *Store) PropertyMappings(ctx context.Context, property string) ([]PropertyChannel, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT ch.slug, p.codes FROM property_channels p JOIN channels ch ON ch.id = p.channel
WHERE p.property_id = $1 ORDER BY ch.slug`, property)
	var out []PropertyChannel
	var slug string
	var codes []byte
	if _, err := pgx.ForEachRow(rows, []any{&slug, &codes}, func() error {
		pc := PropertyChannel{Channel: slug}
		if codes != nil {
			var c storedCodes
			if err := json.Unmarshal(codes, &c); err != nil {
				return fmt.Errorf("codes of %s on %s: %w", property, slug, err)
			}
			pc.Channex, pc.OpenTravel = c.Channex, c.OpenTravel
		}
		out = append(out, pc)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("mappings of %s: %w", property, err)
	}
	return out, nil
}

// DefaultMappingsTTL is how long a Mappings cache trusts what it read before it
// asks PostgreSQL whether the mappings moved (one primary-key read of
// mapping_version): a property mapped over the API is pushed within it.
const DefaultMappingsTTL = 2 * time.Second

// Mappings is the channels' effective configuration: the YAML's, with the codes
// stored over the API (property_channels.codes) laid over its channex.properties
// and opentravel.properties — a property's stored codes on a channel win over the
// YAML's, and a YAML property without stored codes stays in force (the YAML
// seeds, PostgreSQL overrides). It checks mapping_version at most every ttl and reloads the codes
// only when it moved; between checks it answers from memory, except that a
// Channex property it does not map makes it check at once (ChannelsFor,
// ChannelFor): a new property is pushed from its first batch on, a remapped one
// within ttl.
type Mappings struct {
	st   *Store
	base map[string]models.ChannelConfig
	ttl  time.Duration

	mu      sync.Mutex
	checked time.Time
	version int64
	merged  map[string]models.ChannelConfig
}

// NewMappings is the cache of st's mappings over the YAML channels chs; ttl 0 is
// DefaultMappingsTTL.
func (s *Store) NewMappings(chs []models.ChannelConfig, ttl time.Duration) *Mappings {
	if ttl <= 0 {
		ttl = DefaultMappingsTTL
	}
	return &Mappings{st: s, base: models.ChannelMap(chs), ttl: ttl, version: -1}
}

// Channels is the effective configuration of every channel, by slug, as last
// checked (at most ttl ago). The map and its configs are shared: read them, never
// write. On an error it returns the last configuration it had (the YAML's at
// first) with the error.
func (m *Mappings) Channels(ctx context.Context) (map[string]models.ChannelConfig, error) {
	return m.get(ctx, false)
}

// ChannelsFor is Channels checked against PostgreSQL now when a mutation of ms is
// for a Channex channel on which the cached configuration does not map its
// property: a property mapped a moment ago is never refused as unmapped, and the
// usual call costs no query.
func (m *Mappings) ChannelsFor(ctx context.Context, ms []models.Mutation) (map[string]models.ChannelConfig, error) {
	chs, err := m.get(ctx, false)
	if err != nil {
		return chs, err
	}
	for _, mu := range ms {
		if unmapped(chs, mu.Channel, mu.PropertyID, models.ProtocolChannex) {
			return m.get(ctx, true)
		}
	}
	return chs, nil
}

// ChannelFor is channel slug's effective configuration, checked against
// PostgreSQL now when the cached one does not map property (on an OpenTravel
// channel too, where a property without codes is sent under its own: one mapped
// a moment ago is never sent under paritysync's codes).
func (m *Mappings) ChannelFor(ctx context.Context, slug, property string) (models.ChannelConfig, error) {
	chs, err := m.get(ctx, false)
	if err == nil && unmapped(chs, slug, property, models.ProtocolChannex, models.ProtocolOpenTravel) {
		chs, err = m.get(ctx, true)
	}
	return chs[slug], err
}

// unmapped reports whether channel slug of chs speaks one of protocols, each of
// which maps codes per property, and has no codes of property.
func unmapped(chs map[string]models.ChannelConfig, slug, property string, protocols ...models.Protocol) bool {
	cfg, ok := chs[slug]
	if !ok || !slices.Contains(protocols, cfg.Protocol) {
		return false
	}
	switch cfg.Protocol {
	case models.ProtocolChannex:
		_, ok = cfg.Channex.Properties[property]
	case models.ProtocolOpenTravel:
		_, ok = cfg.OpenTravel.Properties[property]
	}
	return !ok
}

// Invalidate makes the next call check PostgreSQL (a writer in this process has
// just moved the mappings).
func (m *Mappings) Invalidate() {
	m.mu.Lock()
	m.checked = time.Time{}
	m.mu.Unlock()
}

// get is the effective configuration: from memory when checked less than ttl
// ago (and fresh is false), else after reading mapping_version, reloaded when it
// moved.
func (m *Mappings) get(ctx context.Context, fresh bool) (map[string]models.ChannelConfig, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !fresh && m.merged != nil && time.Since(m.checked) < m.ttl {
		return m.merged, nil
	}
	last := m.merged
	if last == nil {
		last = m.base
	}
	var version int64
	if err := m.st.pool.QueryRow(ctx, `SELECT version FROM mapping_version`).Scan(&version); err != nil {
		return last, fmt.Errorf("mapping version: %w", err)
	}
	if version == m.version && m.merged != nil {
		m.checked = time.Now()
		return m.merged, nil
	}
	merged, err := m.load(ctx)
	if err != nil {
		return last, err
	}
	m.merged, m.version, m.checked = merged, version, time.Now()
	return merged, nil
}

// load reads every stored code and lays them over the YAML's mappings.
func (m *Mappings) load(ctx context.Context) (map[string]models.ChannelConfig, error) {
	rows, _ := m.st.pool.Query(ctx, `
SELECT ch.slug, p.property_id, p.codes FROM property_channels p JOIN channels ch ON ch.id = p.channel
WHERE p.codes IS NOT NULL`)
	channex := map[string]map[string]models.ChannexProperty{}
	ota := map[string]map[string]models.OpenTravelProperty{}
	var slug, prop string
	var codes []byte
	if _, err := pgx.ForEachRow(rows, []any{&slug, &prop, &codes}, func() error {
		var c storedCodes
		if err := json.Unmarshal(codes, &c); err != nil {
			return fmt.Errorf("codes of %s on %s: %w", prop, slug, err)
		}
		if c.Channex != nil {
			addCodes(channex, slug, prop, *c.Channex)
		}
		if c.OpenTravel != nil {
			addCodes(ota, slug, prop, *c.OpenTravel)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load mappings: %w", err)
	}
	out := make(map[string]models.ChannelConfig, len(m.base))
	for slug, cfg := range m.base {
		if props := channex[slug]; len(props) > 0 && cfg.Protocol == models.ProtocolChannex {
			cfg.Channex = models.ChannexMapping{Properties: overlay(cfg.Channex.Properties, props)}
		}
		if props := ota[slug]; len(props) > 0 && cfg.Protocol == models.ProtocolOpenTravel {
			cfg.OpenTravel = models.OpenTravelMapping{Properties: overlay(cfg.OpenTravel.Properties, props)}
		}
		out[slug] = cfg
	}
	return out, nil
}

// addCodes files property prop's codes p under channel slug.
func addCodes[P any](codes map[string]map[string]P, slug, prop string, p P) {
	if codes[slug] == nil {
		codes[slug] = map[string]P{}
	}
	codes[slug][prop] = p
}

// overlay is a copy of base with stored laid over it: a stored property wins over
// the YAML's of the same id. base is untouched.
func overlay[P any](base, stored map[string]P) map[string]P {
	all := maps.Clone(base)
	if all == nil {
		all = make(map[string]P, len(stored))
	}
	maps.Copy(all, stored)
	return all
}

// ValidatorFor is v checking ms against the effective configuration
// (ChannelsFor); a copy of v, v is untouched.
func (m *Mappings) ValidatorFor(ctx context.Context, v *models.Validator, ms []models.Mutation) (*models.Validator, error) {
	chs, err := m.ChannelsFor(ctx, ms)
	if err != nil {
		return v, err
	}
	cp := *v
	cp.Channels = chs
	return &cp, nil
}
