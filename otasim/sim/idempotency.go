package sim

import "time"

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
