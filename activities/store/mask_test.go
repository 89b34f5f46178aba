package store

import (
	"context"
	"strings"
	"testing"
)

// TestOpenNeverPrintsThePassword opens the store with a password in each form the
// driver takes, none of them reachable: the error names the database with the
// password masked, whether the string did not parse or the server did not answer.
func TestOpenNeverPrintsThePassword(t *testing.T) {
	for _, raw := range []string{
		"postgres://u:pa%zz@127.0.0.1:1/db", "postgres://u:pa%25zz@127.0.0.1:1/db",
		"postgres://u@127.0.0.1:1/db?password=pa%zz", "host=127.0.0.1 port=1 password=pa%zz",
	} {
		_, err := Open(context.Background(), raw)
		if err == nil {
			t.Fatalf("%s: opened", raw)
		}
		if msg := err.Error(); strings.Contains(msg, "pa%zz") || strings.Contains(msg, "pa%25zz") || !strings.Contains(msg, "xxxxx") {
			t.Errorf("%s: %s", raw, msg)
		}
	}
}
