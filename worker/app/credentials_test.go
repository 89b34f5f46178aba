package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/models"
)

// secretFile writes secret to dir/name, as an operator's credentials_file, and
// returns its path.
func secretFile(t *testing.T, dir, name, secret string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCredentialsArePerChannelWithTheSharedOneAsDefault(t *testing.T) {
	cx := models.NewChannelConfig("cx", 60)
	cx.CredentialsFile = secretFile(t, t.TempDir(), "channex.key", "cx-secret\n")
	chs := []models.ChannelConfig{models.NewChannelConfig("expedia", 60), cx}
	creds, err := newCredentials(config.Settings{Token: "shared-secret"}, chs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if s, _ := creds.Secret(ctx, "cx"); s != "cx-secret" {
		t.Errorf("cx secret %q, want its own file's", s)
	}
	if s, _ := creds.Secret(ctx, "expedia"); s != "shared-secret" {
		t.Errorf("expedia secret %q, want the shared one", s)
	}
}

// TestWorkerRefusesAChannelWithoutCredential: no shared credential and one channel
// without a file, or a file that cannot be read, stops the start, naming the
// channel and never the secret.
func TestWorkerRefusesAChannelWithoutCredential(t *testing.T) {
	dir := t.TempDir()
	withFile := models.NewChannelConfig("booking_com", 90)
	withFile.CredentialsFile = secretFile(t, dir, "good", "do-not-print-me")
	missing := models.NewChannelConfig("agoda", 120)
	missing.CredentialsFile = filepath.Join(dir, "absent")
	bare := models.NewChannelConfig("expedia", 60)

	_, err := newCredentials(config.Settings{}, []models.ChannelConfig{withFile, missing, bare})
	var se startupError
	if !errors.As(err, &se) {
		t.Fatalf("error %v, want a startup error", err)
	}
	msg := err.Error()
	for _, want := range []string{"channel agoda: credentials_file", "channel expedia: no credential", "PARITYSYNC_CHANNEL_EXPEDIA_CREDENTIALS_FILE"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "booking_com") || strings.Contains(msg, "do-not-print-me") {
		t.Errorf("error %q names a channel that is fine, or a secret", msg)
	}
}
