package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// FileToken is a bearer token read from a file and read again whenever the file
// changes, so a credential rotated on disk is used without a restart. The token
// itself never appears in an error or a log line.
type FileToken struct {
	path  string
	mu    sync.Mutex
	mod   time.Time
	size  int64
	token string
}

// NewFileToken reads the token at path once, so a missing file fails at start.
func NewFileToken(path string) (*FileToken, error) {
	t := &FileToken{path: path}
	if err := t.Refresh(context.Background()); err != nil {
		return nil, err
	}
	return t, nil
}

// Token returns the current token, re-reading the file when it changed.
func (t *FileToken) Token(context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", t.path, err)
	}
	if fi.ModTime().Equal(t.mod) && fi.Size() == t.size && t.token != "" {
		return t.token, nil
	}
	return t.readLocked(fi)
}

// Refresh re-reads the file whatever its modification time.
func (t *FileToken) Refresh(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("token file %s: %w", t.path, err)
	}
	_, err = t.readLocked(fi)
	return err
}

func (t *FileToken) readLocked(fi os.FileInfo) (string, error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", t.path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s: %w", t.path, errEmptyToken)
	}
	t.token, t.mod, t.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}

var errEmptyToken = errors.New("empty")
