package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/paritysync/paritysync/config"
)

func TestModuleOpensAndMigratesAtStart(t *testing.T) {
	url := testSchema(t)
	var st *Store
	app := fx.New(fx.NopLogger, fx.Supply(config.Settings{DatabaseURL: url}), Module, fx.Populate(&st))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := st.SchemaVersion(ctx); err != nil || v == 0 {
		t.Errorf("schema version %d, %v after start; want migrated", v, err)
	}
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(ctx); err == nil {
		t.Error("the pool is still open after stop")
	}
}

func TestModuleFailsOnAnUnreachableDatabase(t *testing.T) {
	app := fx.New(fx.NopLogger, fx.Supply(config.Settings{DatabaseURL: "postgres://postgres@127.0.0.1:1/none?connect_timeout=2"}), Module,
		fx.Invoke(func(*Store) {}))
	if app.Err() == nil {
		t.Fatal("the module started without a database")
	}
}

// TestModuleGivesEveryActivitySlotAConnection checks that the worker's pool lets
// every activity slot hold a connection at once (pgx's default would be max(4,
// CPUs)), and that a pool_max_conns in the URL still bounds it.
func TestModuleGivesEveryActivitySlotAConnection(t *testing.T) {
	const slots = 32
	url := testSchema(t)
	open := func(url string) *Store {
		var st *Store
		app := fx.New(fx.NopLogger, fx.Supply(config.Settings{DatabaseURL: url, MaxActivities: slots}), Module, fx.Populate(&st))
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Stop(context.Background()) })
		return st
	}
	st := open(url)
	if got := st.pool.Config().MaxConns; got != slots+poolReserve {
		t.Errorf("pool of %d connections for %d activity slots, want %d", got, slots, slots+poolReserve)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var held []*pgxpool.Conn
	func() {
		// Released before the pool closes, which waits for them.
		defer func() {
			for _, c := range held {
				c.Release()
			}
		}()
		for i := range slots {
			c, err := st.pool.Acquire(ctx)
			if err != nil {
				t.Errorf("connection %d of %d slots: %v", i+1, slots, err)
				return
			}
			held = append(held, c)
		}
	}()

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	if got := open(url + sep + "pool_max_conns=7").pool.Config().MaxConns; got != 7 {
		t.Errorf("pool of %d connections with pool_max_conns=7 in the URL, want 7", got)
	}
}
