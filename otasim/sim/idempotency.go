package sim

import (
	"crypto/sha256"
	"time"
)

type stored struct {
	bodyHash [32]byte
	rep      reply
	at       time.Time
}

type idemEntry struct {
	key string
	at  time.Time
}

func (ch *channel) pruneIdem(now time.Time, ttl time.Duration) {
	n := 0
	for n < len(ch.idemOrder) && now.Sub(ch.idemOrder[n].at) >= ttl {
		e := ch.idemOrder[n]
		if ch.idem[e.key].at.Equal(e.at) {
			delete(ch.idem, e.key)
		}
		n++
	}
	if n > 0 {
		ch.idemOrder = append(ch.idemOrder[:0], ch.idemOrder[n:]...)
	}
}

// replay answers a repeated idempotency key: the stored reply for the same content,
// false for a new key. The same key with other content is the caller's to refuse.
func (ch *channel) replay(key string, content []byte, now time.Time, ttl time.Duration) (rep reply, seen, conflict bool) {
	ch.pruneIdem(now, ttl)
	prev, ok := ch.idem[key]
	if !ok {
		return reply{}, false, false
	}
	if prev.bodyHash != sha256.Sum256(content) {
		return reply{}, true, true
	}
	ch.stats.Duplicates++
	return prev.rep.clone(), true, false
}

// remember stores rep for replay under key.
func (ch *channel) remember(key string, content []byte, rep reply, now time.Time) {
	ch.rememberHash(key, sha256.Sum256(content), rep, now)
}

// rememberHash stores rep for replay of content hashed hash under key; a delayed
// push's reply is stored once it is applied (applyLate).
func (ch *channel) rememberHash(key string, hash [32]byte, rep reply, now time.Time) {
	rep = rep.clone()
	// Kept from when it is stored, so the replay log stays in time order.
	keep := func(at time.Time) {
		ch.idem[key] = stored{bodyHash: hash, rep: rep, at: at}
		ch.idemOrder = append(ch.idemOrder, idemEntry{key: key, at: at})
	}
	if ch.deferred != nil {
		*ch.deferred = append(*ch.deferred, keep)
		return
	}
	keep(now)
}
