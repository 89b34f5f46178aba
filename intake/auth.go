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
	admin  bool
}

// roleAdmin is the optional third field of a keys-file line that makes the key an
// operator's: it may pause and resume channels and read and replay the dead-letter
// queue, which act on every tenant's work.
const roleAdmin = "admin"

// keyring holds the API keys of PARITYSYNC_API_KEYS_FILE: one line per key,
// "tenant:<sha256 hex of the key>" or "tenant:<sha256 hex>:admin" for an operator
// key, '#' comments and blank lines ignored. The file
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
		tenant, rest, ok := strings.Cut(line, ":")
		sum, role, hasRole := strings.Cut(rest, ":")
		b, err := hex.DecodeString(strings.ToLower(sum))
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: want tenant:<sha256 hex of the key>[:admin]", n)
		case !tenantPattern.MatchString(tenant):
			return nil, fmt.Errorf("line %d: tenant %q must match %s", n, tenant, tenantPattern)
		case err != nil || len(b) != sha256.Size:
			return nil, fmt.Errorf("line %d: the key's SHA-256 must be 64 hex digits", n)
		case hasRole && role != roleAdmin:
			return nil, fmt.Errorf("line %d: the role, when given, must be %q", n, roleAdmin)
		}
		keys = append(keys, apiKey{tenant: tenant, sum: b, admin: hasRole})
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

// lookup returns the entry of key. Every configured key is compared, in constant
// time, so the answer's timing says nothing about which key came close.
func (k *keyring) lookup(key string) (apiKey, bool) {
	sum := sha256.Sum256([]byte(key))
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refresh(time.Now())
	var found apiKey
	for _, e := range k.keys {
		if subtle.ConstantTimeCompare(sum[:], e.sum) == 1 {
			found = e
		}
	}
	return found, found.tenant != ""
}

type callerKey struct{}

// tenantOf is the authenticated tenant of a request.
func tenantOf(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(apiKey)
	return c.tenant
}

// adminOnly lets only operator keys (role admin) through; a tenant key is answered
// 403.
func adminOnly(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, _ := r.Context().Value(callerKey{}).(apiKey); !c.admin {
			writeProblem(w, r, http.StatusForbidden, probForbidden,
				"this operation acts on every tenant's work: it takes an operator key (role admin in the keys file)")
			return
		}
		next(w, r)
	}
}

// authenticate lets a request with a valid "Authorization: Bearer <key>" through
// with its tenant in the context; anything else is answered 401.
func (k *keyring) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var caller apiKey
		known := false
		if ok && key != "" {
			caller, known = k.lookup(strings.TrimSpace(key))
		}
		if !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="paritysync"`)
			writeProblem(w, r, http.StatusUnauthorized, probUnauthorized,
				"send Authorization: Bearer <your API key>")
			return
		}
		if l, ok := r.Context().Value(logKey{}).(*requestLog); ok {
			l.tenant = caller.tenant
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)))
	})
}
