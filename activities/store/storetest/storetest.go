// Package storetest gives tests a PostgreSQL schema of their own on the local
// database, dropped when the test ends.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/paritysync/paritysync/dial/testenv"
)

// DatabaseURL is the database tests create their schemas in:
// PARITYSYNC_TEST_DATABASE_URL, or the local PostgreSQL's postgres database.
func DatabaseURL() string {
	if u := os.Getenv("PARITYSYNC_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Schema creates a schema named after prefix and a random suffix, drops it (and
// everything in it) when the test ends, and returns the URL that selects it. An
// unreachable database fails the test under PARITYSYNC_TEST_REQUIRE (make test
// sets it) and skips it otherwise.
func Schema(tb testing.TB, prefix string) string {
	tb.Helper()
	u, drop, err := NewSchema(prefix)
	if err != nil {
		if errors.Is(err, ErrUnreachable) {
			testenv.Unavailable(tb, err.Error(), nil)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := drop(); err != nil {
			tb.Error(err)
		}
	})
	return u
}

// ErrUnreachable is NewSchema's error when the database does not answer.
var ErrUnreachable = errors.New("PostgreSQL not reachable")

// NewSchema creates a schema named after prefix and a random suffix and returns
// the URL that selects it and the function that drops it, for code without a
// testing.TB (examples, TestMain).
func NewSchema(prefix string) (string, func() error, error) {
	ctx := context.Background()
	base := DatabaseURL()
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("PARITYSYNC_TEST_DATABASE_URL: %w", err)
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		// The host only: no credentials in the message.
		return "", nil, fmt.Errorf("%w: PostgreSQL at %s not reachable (PARITYSYNC_TEST_DATABASE_URL): %v", ErrUnreachable, u.Host, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := prefix + "_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		_ = admin.Close(ctx)
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() error {
		defer admin.Close(context.Background())
		// Connections still open in the schema (a stopped worker's pool) do not hold
		// a DROP SCHEMA back: it waits only for row locks, none of which outlive
		// their transactions.
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// Database creates a database of the test's own, named after prefix and a random
// suffix, on the server of DatabaseURL, drops it when the test ends, and returns
// its URL. A measurement of table sizes needs one: VACUUM keeps the row versions a
// transaction of the same database may still see, so tests running beside it in
// another schema would leave their bloat in its figures.
func Database(tb testing.TB, prefix string) string {
	tb.Helper()
	ctx := context.Background()
	base := DatabaseURL()
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("PARITYSYNC_TEST_DATABASE_URL: %v", err)
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		testenv.Unavailable(tb, "PostgreSQL at "+u.Host+" not reachable (PARITYSYNC_TEST_DATABASE_URL)", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close(ctx)
		tb.Fatalf("create database: %v", err)
	}
	tb.Cleanup(func() {
		defer admin.Close(context.Background())
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String()
}
