package store

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/fx"

	"github.com/paritysync/paritysync/config"
)

// Module provides the worker's *Store from config.Settings: opened with a
// connection for each activity slot (PARITYSYNC_MAX_ACTIVITIES) unless the URL's
// pool_max_conns says otherwise, and migrated when constructed, so an unreachable
// database or a failed migration stops the worker at start, and closed at stop.
var Module = fx.Module("store", fx.Provide(provide))

// poolReserve is the connections the worker keeps beyond one per activity slot:
// the parity lag gauges, the mappings' version check and a migration at start use
// the pool beside the activities.
const poolReserve = 4

// startTimeout bounds connecting and migrating at start; a migration waiting for
// another worker's lock is included.
const startTimeout = time.Minute

func provide(lc fx.Lifecycle, s config.Settings) (*Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// One connection per activity slot: each activity holds at most one at a time.
	st, err := Open(ctx, s.DatabaseURL, WithPoolSize(s.MaxActivities+poolReserve))
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("postgres at %s: %w", config.MaskURL(s.DatabaseURL), err)
	}
	lc.Append(fx.StopHook(st.Close))
	return st, nil
}
