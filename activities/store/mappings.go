package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// SetPropertyChannels makes channels (slugs) the whole list of channels property
// is on, in one transaction; an empty list unmaps it.
func (s *Store) SetPropertyChannels(ctx context.Context, property string, channels []string) error {
	ids, err := s.channelIDs(ctx, channels...)
	if err != nil {
		return fmt.Errorf("map property %s: %w", property, err)
	}
	chIDs := make([]int16, 0, len(ids))
	for _, id := range ids {
		chIDs = append(chIDs, id)
	}
	now := s.now()
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM property_channels WHERE property_id = $1 AND NOT channel = ANY($2)`,
			property, chIDs); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
INSERT INTO property_channels (property_id, channel, updated_at) SELECT $1, c, $3 FROM unnest($2::smallint[]) c
ON CONFLICT (property_id, channel) DO NOTHING`, property, chIDs, now)
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
