package channels

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Credential hands out one channel's secret: a bearer token, an API key or a
// user:password pair, as the channel's protocol uses it. The client asks for it on
// every call, so a rotated or refreshed secret is used at once and never sits in a
// request, a workflow input, a log line or an error.
type Credential interface {
	// Secret is the current secret.
	Secret(ctx context.Context) (string, error)
	// Refresh obtains a new secret, after a 401.
	Refresh(ctx context.Context) error
}

// StaticCredential is a Credential that always returns secret; Refresh does nothing.
func StaticCredential(secret string) Credential { return staticCredential(secret) }

type staticCredential string

func (t staticCredential) Secret(context.Context) (string, error) { return string(t), nil }
func (t staticCredential) Refresh(context.Context) error          { return nil }

// Credentials holds each channel's Credential by slug: every channel has its own, so
// one channel's key is never sent to another.
type Credentials map[string]Credential

// ErrNoCredential is returned for a channel without a configured credential.
var ErrNoCredential = errors.New("no credential configured")

// Secret is channel's current secret.
func (cs Credentials) Secret(ctx context.Context, channel string) (string, error) {
	c, ok := cs[channel]
	if !ok {
		return "", fmt.Errorf("channel %s: %w", channel, ErrNoCredential)
	}
	return c.Secret(ctx)
}

// Refresh re-reads channel's credential, after a 401.
func (cs Credentials) Refresh(ctx context.Context, channel string) error {
	c, ok := cs[channel]
	if !ok {
		return fmt.Errorf("channel %s: %w", channel, ErrNoCredential)
	}
	return c.Refresh(ctx)
}

// FileCredential is a secret read from a file and read again whenever the file
// changes, so a credential rotated on disk is used without a restart. The secret
// itself never appears in an error or a log line.
type FileCredential struct {
	path  string
	mu    sync.Mutex
	mod   time.Time
	size  int64
	token string
}

// NewFileCredential reads the secret at path once, so a missing file fails at start.
func NewFileCredential(path string) (*FileCredential, error) {
	t := &FileCredential{path: path}
	if err := t.Refresh(context.Background()); err != nil {
		return nil, err
	}
	return t, nil
}

// Secret returns the current secret, re-reading the file when it changed.
func (t *FileCredential) Secret(context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("credentials file %s: %w", t.path, err)
	}
	if fi.ModTime().Equal(t.mod) && fi.Size() == t.size && t.token != "" {
		return t.token, nil
	}
	return t.readLocked(fi)
}

// Refresh re-reads the file whatever its modification time.
func (t *FileCredential) Refresh(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("credentials file %s: %w", t.path, err)
	}
	_, err = t.readLocked(fi)
	return err
}

func (t *FileCredential) readLocked(fi os.FileInfo) (string, error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("credentials file %s: %w", t.path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("credentials file %s: %w", t.path, errEmptyToken)
	}
	t.token, t.mod, t.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}

var errEmptyToken = errors.New("empty")
