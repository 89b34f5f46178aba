package store

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/fx"

	"github.com/paritysync/paritysync/config"
)

// Module provides the worker's *Store from config.Settings: opened and migrated
// when constructed, so an unreachable database or a failed migration stops the
// worker at start, and closed at stop.
var Module = fx.Module("store", fx.Provide(provide))

// startTimeout bounds connecting and migrating at start; a migration waiting for
// another worker's lock is included.
const startTimeout = time.Minute

func provide(lc fx.Lifecycle, s config.Settings) (*Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	st, err := Open(ctx, s.DatabaseURL)
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
