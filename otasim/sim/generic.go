package sim

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/paritysync/paritysync/models"
)

// maxIdempotencyKeyLen bounds the X-Idempotency-Key header.
const maxIdempotencyKeyLen = 255

func (s *Simulator) servePush(w http.ResponseWriter, r *http.Request, ch *channel) {
	s.handlePush(w, r, ch, func(body []byte, readErr error, now time.Time, f Faults, rec *RequestRecord) reply {
		rep, key := s.push(ch, r, body, readErr, now, f, rec)
		ch.rateHeaders(key, now, rep.header)
		return rep
	})
}

// push decides one push; it runs under s.mu and returns the limit key it counted
// against ("" when the request never got that far).
func (s *Simulator) push(ch *channel, r *http.Request, body []byte, readErr error, now time.Time, f Faults, rec *RequestRecord) (reply, string) {
	if !s.authorized(r.Header.Get("Authorization"), now) {
		ch.stats.AuthFailures++
		rep := errorReply(http.StatusUnauthorized, models.ErrorUnauthorized, "bearer token missing, unknown or expired")
		rep.header.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		return rep, ""
	}
	if readErr != nil {
		ch.stats.Invalid++
		var tooBig *http.MaxBytesError
		if errors.As(readErr, &tooBig) {
			return errorReply(http.StatusRequestEntityTooLarge, models.ErrorInvalid,
				fmt.Sprintf("body: larger than %d bytes", tooBig.Limit)), ""
		}
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "body: unreadable"), ""
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		ch.stats.Invalid++
		return errorReply(http.StatusUnsupportedMediaType, models.ErrorInvalid, "Content-Type: want application/json"), ""
	}
	idemKey := r.Header.Get(models.HeaderIdempotencyKey)
	if idemKey == "" || len(idemKey) > maxIdempotencyKeyLen {
		ch.stats.Invalid++
		return errorReply(http.StatusBadRequest, models.ErrorInvalid,
			fmt.Sprintf("%s: required, at most %d characters", models.HeaderIdempotencyKey, maxIdempotencyKeyLen)), ""
	}
	req, err := decodeRequest(body, ch.cfg)
	if err != nil {
		ch.stats.Invalid++
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, err.Error()), ""
	}
	rec.Property, rec.Family, rec.Lines = req.PropertyID, req.Family, len(req.Lines)
	for _, l := range req.Lines {
		rec.Nights += l.Nights()
	}

	key := ch.limitKey(req.PropertyID)
	ch.arrive(key, now)

	if status := s.stormStatus(ch, f, now); status != 0 {
		return ch.throttle(key, status, s.stormUntil.Sub(now), now), key
	}
	win := ch.window(ch.windows, key)
	if win.count(now) >= ch.cfg.RatePerMinute {
		ch.stats.Throttled++
		return ch.throttle(key, http.StatusTooManyRequests, win.nextFree(now), now), key
	}
	win.add(now)
	ch.receive(req)

	hash := sha256.Sum256(body)
	ch.pruneIdem(now, s.cfg.IdempotencyTTL)
	if prev, ok := ch.idem[idemKey]; ok {
		if prev.bodyHash != hash {
			ch.stats.Invalid++
			return errorReply(http.StatusBadRequest, models.ErrorInvalid,
				models.HeaderIdempotencyKey+": reused with a different body"), key
		}
		ch.stats.Duplicates++
		return prev.rep.clone(), key
	}

	cost := 1
	if ch.cfg.QuotaUnit == models.QuotaLines {
		cost = len(req.Lines)
	}
	ch.rollQuota(now)
	if ch.cfg.DailyQuota > 0 && ch.stats.DailyUsed+cost > ch.cfg.DailyQuota {
		ch.stats.QuotaExhausted++
		return errorReply(http.StatusBadRequest, models.ErrorQuotaExhausted,
			fmt.Sprintf("daily quota of %d %s used; resets at 00:00 UTC", ch.cfg.DailyQuota, ch.cfg.QuotaUnit)), key
	}
	ch.stats.DailyUsed += cost

	if s.serverFault(ch, f.ErrorRatio) {
		return errorReply(s.serverStatus(), models.ErrorServer, "injected server error"), key
	}

	if rep, bad := s.badBody(ch, f, func() (reply, reply) {
		return s.acceptedReply(ch, len(req.Lines)), errorReply(http.StatusBadRequest, models.ErrorInvalid, "injected error inside a 200")
	}); bad {
		return rep, key
	}

	drift, partial := s.outcomeFaults(ch, f)
	failed := map[int]bool{}
	if partial {
		for i := range req.Lines {
			if s.rng.IntN(2) == 0 {
				failed[i] = true
			}
		}
		if len(failed) == 0 {
			failed[s.rng.IntN(len(req.Lines))] = true
		}
	}
	if !drift {
		for i, l := range req.Lines {
			if !failed[i] {
				ch.apply(req.PropertyID, req.Family, l)
			}
		}
	}

	ch.seq++
	conf := fmt.Sprintf("%s-%06d", ch.cfg.Slug, ch.seq)
	var rep reply
	if len(failed) == 0 {
		ch.stats.Accepted++
		rep = jsonReply(http.StatusOK, models.ARIAccepted{ConfirmationID: conf, Accepted: len(req.Lines)})
	} else {
		ch.stats.Partial++
		res := models.ARIPartial{ConfirmationID: conf, Results: make([]models.ARILineResult, len(req.Lines))}
		for i := range req.Lines {
			res.Results[i] = models.ARILineResult{Line: i, Status: models.LineOK}
			if failed[i] {
				res.Results[i] = models.ARILineResult{Line: i, Status: models.LineError,
					Code: "line_rejected", Message: "injected line failure"}
			}
		}
		rep = jsonReply(http.StatusMultiStatus, res)
	}
	rep.header.Set(models.HeaderConfirmationID, conf)
	ch.rememberHash(idemKey, hash, rep, now)

	if s.serverFault(ch, f.CommitThen500Ratio) {
		return errorReply(http.StatusInternalServerError, models.ErrorServer, "injected error after commit"), key
	}
	return rep, key
}

// acceptedReply is the 200 the generic protocol would give n lines, for the
// truncated bad body; it takes no confirmation number.
func (s *Simulator) acceptedReply(ch *channel, n int) reply {
	conf := fmt.Sprintf("%s-%06d", ch.cfg.Slug, ch.seq+1)
	rep := jsonReply(http.StatusOK, models.ARIAccepted{ConfirmationID: conf, Accepted: n})
	rep.header.Set(models.HeaderConfirmationID, conf)
	return rep
}
