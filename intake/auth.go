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
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// apiKey is one tenant's key, as the SHA-256 of the key.
type apiKey struct {
	tenant string
	sum    []byte
	admin  bool
	// properties are the property id patterns (path.Match globs: prop_1a2b3c4d,
	// prop_1a2b*) a tenant key may write; an operator key writes every property.
	properties []string
}

// mayWrite reports whether the key may write property's cells.
func (k apiKey) mayWrite(property string) bool {
	if k.admin {
		return true
	}
	for _, p := range k.properties {
		if ok, _ := path.Match(p, property); ok {
			return true
		}
	}
	return false
}

// propertiesField starts the keys-file field that lists a key's properties.
const propertiesField = "properties="

// roleAdmin is the optional third field of a keys-file line that makes the key an
// operator's: it may pause and resume channels and read and replay the dead-letter
// queue, which act on every tenant's work.
const roleAdmin = "admin"

// keyring holds the API keys of PARITYSYNC_API_KEYS_FILE: one line per key,
// "tenant:<sha256 hex of the key>[:admin][:properties=<pattern>,<pattern>…]",
// '#' comments and blank lines ignored. ":admin" makes an operator key; a tenant
// key writes only the properties its patterns match (path.Match globs such as
// prop_1a2b3c4d or prop_1a2b*), and none without a properties field. The file
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
		fields := strings.Split(rest, ":")
		b, err := hex.DecodeString(strings.ToLower(fields[0]))
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: want %s", n, keyLineForm)
		case !ops.TenantPattern.MatchString(tenant):
			return nil, fmt.Errorf("line %d: tenant %q must match %s", n, tenant, ops.TenantPattern)
		case err != nil || len(b) != sha256.Size:
			return nil, fmt.Errorf("line %d: the key's SHA-256 must be 64 hex digits", n)
		}
		key := apiKey{tenant: tenant, sum: b}
		for _, f := range fields[1:] {
			list, isList := strings.CutPrefix(f, propertiesField)
			switch {
			case f == roleAdmin && !key.admin:
				key.admin = true
			case isList && key.properties == nil:
				if key.properties, err = parsePropertyPatterns(list); err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
			case isList:
				return nil, fmt.Errorf("line %d: give %s once", n, propertiesField)
			default:
				return nil, fmt.Errorf("line %d: the role, when given, must be %q; after it only %s<pattern>,… (want %s)",
					n, roleAdmin, propertiesField, keyLineForm)
			}
		}
		keys = append(keys, key)
	}
	return keys, sc.Err()
}

// keyLineForm is the form of a keys-file line, for errors.
const keyLineForm = "tenant:<sha256 hex of the key>[:admin][:properties=<pattern>,<pattern>…]"

// parsePropertyPatterns reads a properties field's comma-separated globs.
func parsePropertyPatterns(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return nil, fmt.Errorf("property pattern %q must be a property id or a glob such as prop_1a2b*", p)
		}
		out = append(out, p)
	}
	return out, nil
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
func tenantOf(ctx context.Context) string { return callerOf(ctx).tenant }

// callerOf is the authenticated key of a request.
func callerOf(ctx context.Context) apiKey {
	c, _ := ctx.Value(callerKey{}).(apiKey)
	return c
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

// authenticate lets a request with one valid "Authorization: Bearer <key>" header
// through with its tenant in the context; the scheme is case-insensitive (RFC
// 9110 §11.1). Anything else, two Authorization headers included, is answered 401.
func (k *keyring) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		values := r.Header.Values("Authorization")
		var caller apiKey
		known := false
		if len(values) == 1 {
			scheme, key, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
			if key = strings.TrimSpace(key); ok && strings.EqualFold(scheme, "Bearer") && key != "" {
				caller, known = k.lookup(key)
			}
		}
		if !known {
			detail := "send Authorization: Bearer <your API key>"
			if len(values) > 1 {
				detail = "send one Authorization header, not " + strconv.Itoa(len(values))
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="paritysync"`)
			writeProblem(w, r, http.StatusUnauthorized, probUnauthorized, detail)
			return
		}
		if l, ok := r.Context().Value(logKey{}).(*requestLog); ok {
			l.tenant = caller.tenant
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)))
	})
}

// ruleNotOwned refuses a mutation for a property the caller's key does not list.
const ruleNotOwned = "must be a property of the API key"

// claim refuses, before anything is validated further or recorded, every row of d
// for a property the caller may not write: the row moves to d.Problems (field
// property_id, ruleNotOwned), which stay in body order. An operator key claims
// every row.
func claim(caller apiKey, d models.Decoded) models.Decoded {
	if caller.admin {
		return d
	}
	out := d
	out.Mutations, out.Lines, out.Indexes = nil, nil, nil
	out.Problems = slices.Clone(d.Problems)
	refused := false
	for i, m := range d.Mutations {
		// A row without a property is Validate's to refuse (required).
		if m.PropertyID == "" || caller.mayWrite(m.PropertyID) {
			out.Mutations = append(out.Mutations, m)
			out.Lines = append(out.Lines, d.Lines[i])
			out.Indexes = append(out.Indexes, d.Indexes[i])
			continue
		}
		refused = true
		out.Problems = append(out.Problems, models.RowProblem{Line: d.Lines[i], Index: d.Indexes[i], ID: m.ID,
			Field: "property_id", Rule: ruleNotOwned,
			Detail: fmt.Sprintf("tenant %s's API key does not list property %s", caller.tenant, m.PropertyID)})
	}
	if refused {
		sort.SliceStable(out.Problems, func(a, b int) bool { return out.Problems[a].Index < out.Problems[b].Index })
	}
	return out
}
