package channels

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeTokenFile(t *testing.T, path, content string, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// openTokenFile writes content to a token file last modified an hour ago (t0, to
// the second) and opens it.
func openTokenFile(t *testing.T, content string) (ft *FileCredential, path string, t0 time.Time) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "token")
	t0 = time.Now().Add(-time.Hour).Truncate(time.Second)
	writeTokenFile(t, path, content, t0)
	ft, err := NewFileCredential(path)
	if err != nil {
		t.Fatal(err)
	}
	return ft, path, t0
}

func TestFileCredentialRereadsChangedFile(t *testing.T) {
	ft, path, t0 := openTokenFile(t, "token-one\n")
	ctx := context.Background()
	if tok, err := ft.Secret(ctx); err != nil || tok != "token-one" {
		t.Fatalf("token %q, %v; want token-one", tok, err)
	}
	// Same size, newer modification time.
	writeTokenFile(t, path, "token-two\n", t0.Add(time.Minute))
	if tok, err := ft.Secret(ctx); err != nil || tok != "token-two" {
		t.Errorf("after rotation token %q, %v; want token-two", tok, err)
	}
	// Different size, same modification time.
	writeTokenFile(t, path, "token-three\n", t0.Add(time.Minute))
	if tok, err := ft.Secret(ctx); err != nil || tok != "token-three" {
		t.Errorf("after rotation token %q, %v; want token-three", tok, err)
	}
}

func TestFileCredentialRefreshForcesReread(t *testing.T) {
	ft, path, t0 := openTokenFile(t, "aaaa")
	ctx := context.Background()
	// Same size and modification time: Token cannot see the change, Refresh must.
	writeTokenFile(t, path, "bbbb", t0)
	if tok, _ := ft.Secret(ctx); tok != "aaaa" {
		t.Fatalf("token %q before refresh; the file looked unchanged, want the cached aaaa", tok)
	}
	if err := ft.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if tok, err := ft.Secret(ctx); err != nil || tok != "bbbb" {
		t.Errorf("after refresh token %q, %v; want bbbb", tok, err)
	}
}

func TestFileCredentialEmptyFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	writeTokenFile(t, empty, " \n\t\n", time.Now())
	if _, err := NewFileCredential(empty); err == nil {
		t.Error("NewFileCredential accepted a blank file")
	}

	ft, path, t0 := openTokenFile(t, "secret-bearer-value")
	writeTokenFile(t, path, "   \n", t0.Add(time.Minute))
	tok, err := ft.Secret(context.Background())
	if err == nil {
		t.Fatalf("blanked file gave token %q, want an error", tok)
	}
	if strings.Contains(err.Error(), "secret-bearer-value") || strings.Contains(err.Error(), "   \n") {
		t.Errorf("error %q contains file content", err)
	}
	if err := ft.Refresh(context.Background()); err == nil || strings.Contains(err.Error(), "secret-bearer-value") {
		t.Errorf("refresh of a blank file: err %v, want an error without the old token", err)
	}
}

func TestCredentialsArePerChannel(t *testing.T) {
	creds := Credentials{"a": StaticCredential("key-a"), "b": StaticCredential("key-b")}
	ctx := context.Background()
	if s, err := creds.Secret(ctx, "b"); err != nil || s != "key-b" {
		t.Errorf("b: %q, %v", s, err)
	}
	_, err := creds.Secret(ctx, "c")
	if !errors.Is(err, ErrNoCredential) || !strings.Contains(err.Error(), "channel c") {
		t.Errorf("unconfigured channel: %v, want ErrNoCredential naming it", err)
	}
	if err := creds.Refresh(ctx, "c"); !errors.Is(err, ErrNoCredential) {
		t.Errorf("refresh of an unconfigured channel: %v", err)
	}
}
