package store

import (
	"context"
	"testing"

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
