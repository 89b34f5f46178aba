package sim

import (
	"strconv"
	"strings"
	"time"
)

// authorized accepts a bearer token that tokenValid accepts.
func (s *Simulator) authorized(h string, now time.Time) bool {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return false
	}
	return s.tokenValid(tok, now)
}

// tokenValid accepts a static token, or a simtoken-<unix> issued no later than a
// minute from now and no longer than TokenMaxAge ago.
func (s *Simulator) tokenValid(tok string, now time.Time) bool {
	if tok == "" {
		return false
	}
	if s.static[tok] {
		return true
	}
	digits, ok := strings.CutPrefix(tok, TokenPrefix)
	if !ok {
		return false
	}
	sec, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || sec < 0 || sec > now.Unix()+60 {
		return false
	}
	return now.Unix()-sec <= int64(s.cfg.TokenMaxAge/time.Second)
}
