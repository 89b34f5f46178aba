package store

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations are the versioned schema changes, applied in order of their number
// prefix (0001_name.sql). An applied migration is never edited: add a new one.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migration is one versioned schema change.
type migration struct {
	version int
	name    string
	sql     string
	sum     string
}

// loadMigrations reads the embedded migrations, sorted by version.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: want NNNN_name.sql", base)
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		if len(out) > 0 && out[len(out)-1].version >= v {
			return nil, fmt.Errorf("migration %s: version %d used twice", base, v)
		}
		sum := sha256.Sum256(body)
		out = append(out, migration{version: v, name: base, sql: string(body), sum: hex.EncodeToString(sum[:])})
	}
	return out, nil
}

// migrateLock names the advisory lock that serializes migrations of one schema.
const migrateLock = "paritysync.migrate:"

// Migrate brings the schema up to date; the worker calls it at start. Each migration
// runs in its own transaction under an advisory lock keyed by the schema, so workers
// starting together apply each migration exactly once and the others wait for it. It
// fails when an applied migration's text changed since it was applied.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := s.inTx(ctx, func(tx pgx.Tx) error { return apply(ctx, tx, m) }); err != nil {
			return fmt.Errorf("migrate %s: %w", m.name, err)
		}
	}
	return nil
}

// apply runs migration m in tx unless it was applied before.
func apply(ctx context.Context, tx pgx.Tx, m migration) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1 || current_schema(), 0))`,
		migrateLock); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return err
	}
	var sum string
	err := tx.QueryRow(ctx, `SELECT sha256 FROM schema_migrations WHERE version = $1`, m.version).Scan(&sum)
	switch {
	case err == nil && sum == m.sum:
		return nil
	case err == nil:
		return fmt.Errorf("applied migration %d changed since (sha256 %s, now %s): add a new migration instead",
			m.version, sum, m.sum)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)`,
		m.version, m.name, m.sum)
	return err
}

// SchemaVersion is the newest migration applied, 0 on an empty schema.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("schema version: %w", err)
	}
	return v, nil
}
