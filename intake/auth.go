package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// tenantPattern is what a tenant name may be: it starts every batch id of the
// tenant, so it must not hold the separator '.' or anything a URL would escape.
var tenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// apiKey is one tenant's key, as the SHA-256 of the key.
type apiKey struct {
	tenant string
	sum    []byte
}

// keyring holds the API keys of PARITYSYNC_API_KEYS_FILE: one line per PMS tenant,
// "tenant:<sha256 hex of the key>", '#' comments and blank lines ignored. The file
// is read at start and again when its modification time or size changes (looked at
// at most once a second), so a key is added or revoked without a restart; a file
// that became unreadable or malformed keeps the keys last read, and says so in the
// log once per change.
type keyring struct {
	path string
	mu   sync.Mutex
	keys []apiKey
	seen struct {
		mod  time.Time
		size int64
	}
	checked time.Time
	onErr   func(error)
}

func newKeyring(path string, onErr func(error)) (*keyring, error) {
	k := &keyring{path: path, onErr: onErr}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("PARITYSYNC_API_KEYS_FILE: %w", err)
	}
	if err := k.load(st); err != nil {
		return nil, err
	}
	return k, nil
}

// parseKeys reads a keys file's body.
func parseKeys(body []byte) ([]apiKey, error) {
	var keys []apiKey
	sc := bufio.NewScanner(bytes.NewReader(body))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tenant, sum, ok := strings.Cut(line, ":")
		b, err := hex.DecodeString(strings.ToLower(sum))
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: want tenant:<sha256 hex of the key>", n)
		case !tenantPattern.MatchString(tenant):
			return nil, fmt.Errorf("line %d: tenant %q must match %s", n, tenant, tenantPattern)
		case err != nil || len(b) != sha256.Size:
			return nil, fmt.Errorf("line %d: the key's SHA-256 must be 64 hex digits", n)
		}
		keys = append(keys, apiKey{tenant: tenant, sum: b})
	}
	return keys, sc.Err()
}

func (k *keyring) load(st os.FileInfo) error {
	body, err := os.ReadFile(k.path)
	if err != nil {
		return fmt.Errorf("PARITYSYNC_API_KEYS_FILE: %w", err)
	}
	keys, err := parseKeys(body)
	if err != nil {
		return fmt.Errorf("PARITYSYNC_API_KEYS_FILE %s: %w", k.path, err)
	}
	k.keys = keys
	k.seen.mod, k.seen.size = st.ModTime(), st.Size()
	return nil
}

// refresh re-reads the file when it changed; the caller holds k.mu.
func (k *keyring) refresh(now time.Time) {
	if now.Sub(k.checked) < time.Second {
		return
	}
	k.checked = now
	st, err := os.Stat(k.path)
	if err != nil || (st.ModTime().Equal(k.seen.mod) && st.Size() == k.seen.size) {
		return
	}
	if err := k.load(st); err != nil {
		k.seen.mod, k.seen.size = st.ModTime(), st.Size() // report once per change
		if k.onErr != nil {
			k.onErr(err)
		}
	}
}

// tenant returns the tenant whose key key is. Every configured key is compared, in
// constant time, so the answer's timing says nothing about which key came close.
func (k *keyring) tenant(key string) (string, bool) {
	sum := sha256.Sum256([]byte(key))
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refresh(time.Now())
	found := ""
	for _, e := range k.keys {
		if subtle.ConstantTimeCompare(sum[:], e.sum) == 1 {
			found = e.tenant
		}
	}
	return found, found != ""
}

type tenantKey struct{}

// tenantOf is the authenticated tenant of a request.
func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// authenticate lets a request with a valid "Authorization: Bearer <key>" through
// with its tenant in the context; anything else is answered 401.
func (k *keyring) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		tenant, known := "", false
		if ok && key != "" {
			tenant, known = k.tenant(strings.TrimSpace(key))
		}
		if !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="paritysync"`)
			writeProblem(w, r, http.StatusUnauthorized, probUnauthorized,
				"send Authorization: Bearer <your API key>")
			return
		}
		if l, ok := r.Context().Value(logKey{}).(*requestLog); ok {
			l.tenant = tenant
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}
