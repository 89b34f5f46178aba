// Package storetest gives tests a PostgreSQL schema of their own on the local
// database, dropped when the test ends.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	ctx := context.Background()
	base := DatabaseURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		host := "?"
		if u, perr := url.Parse(base); perr == nil {
			host = u.Host // no credentials in the message
		}
		testenv.Unavailable(tb, "PostgreSQL at "+host+" not reachable (PARITYSYNC_TEST_DATABASE_URL)", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := prefix + "_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		defer admin.Close(context.Background())
		// Connections still open in the schema (a stopped worker's pool) do not hold
		// a DROP SCHEMA back: it waits only for row locks, none of which outlive
		// their transactions.
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("parse %s: %v", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
