package channels

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/paritysync/paritysync/models"
)

// paritySync is the generic JSON contract: POST and GET {base}/ari, a bearer token,
// 207 for partial success and 400 quota_exhausted.
type paritySync struct{}

const ariPath = "/ari"

func (paritySync) encode(_ models.ChannelConfig, req models.ChannelRequest, _ time.Time) (call, error) {
	body, err := json.Marshal(req.Body())
	if err != nil {
		return call{}, fmt.Errorf("encode %s request: %w", req.Channel, err)
	}
	return call{method: http.MethodPost, path: ariPath, contentType: "application/json", body: body}, nil
}

func (paritySync) authorize(h http.Header, secret string) {
	h.Set("Authorization", "Bearer "+secret)
	h.Set("Accept", "application/json")
}

func (paritySync) interpret(out *PushResponse, c call, h http.Header, raw []byte) {
	if is2xx(out.Status) {
		interpretARISuccess(out, c, h, raw)
		return
	}
	var apiErr models.ARIError
	_ = json.Unmarshal(raw, &apiErr) // absent or foreign bodies just leave it empty
	out.Message = ariMessage(out.Status, apiErr, raw)
	if out.Status == http.StatusBadRequest && apiErr.Error == models.ErrorQuotaExhausted {
		out.Class = ClassQuotaExhausted
		return
	}
	out.Class = byStatus(out.Status, out.ServerWait)
}

// interpretARISuccess reads a 2xx, which commits only the lines its body accepts: a
// 200 must carry a confirmation and accept every line, a 207 must give each line
// its result. Anything else — empty, truncated, an HTML page, an error object — is
// not a confirmation, whatever the status says.
func interpretARISuccess(out *PushResponse, c call, h http.Header, raw []byte) {
	if err := jsonObject(raw); err != nil {
		// Whether the lines applied is unknown; a retry under the same idempotency
		// key is safe and may get a readable answer.
		out.Class, out.Message = ClassTransient, unreadable(err, raw)
		return
	}
	var apiErr models.ARIError
	_ = json.Unmarshal(raw, &apiErr) // a JSON object: fields of other types stay empty
	if apiErr.Error != "" {
		out.Class, out.Message = ariErrorClass(apiErr.Error), ariMessage(out.Status, apiErr, raw)
		return
	}
	if out.Status == http.StatusMultiStatus {
		var p models.ARIPartial
		if err := json.Unmarshal(raw, &p); err != nil || !coversEachLine(p.Results, c.lines) {
			out.Class, out.Message = ClassTransient, "207 answer without one result per line: "+bodyText(out.Status, raw)
			return
		}
		out.Class, out.ConfirmationID = ClassPartial, p.ConfirmationID
		if out.ConfirmationID == "" {
			out.ConfirmationID = h.Get(models.HeaderConfirmationID)
		}
		for _, r := range p.Results {
			if r.Status == models.LineOK {
				out.Accepted++
			} else {
				out.Failed = append(out.Failed, LineFailure{Line: r.Line, Code: r.Code, Message: truncate(r.Message)})
			}
		}
		return
	}
	var a models.ARIAccepted
	if err := json.Unmarshal(raw, &a); err != nil {
		out.Class, out.Message = ClassTransient, unreadable(err, raw)
		return
	}
	if a.ConfirmationID == "" {
		a.ConfirmationID = h.Get(models.HeaderConfirmationID)
	}
	switch {
	case a.ConfirmationID == "":
		out.Class, out.Message = ClassTransient, "answer without a confirmation_id: "+bodyText(out.Status, raw)
	case a.Accepted != c.lines:
		out.Class, out.Message = ClassTransient, fmt.Sprintf("answer accepts %d of %d lines: %s", a.Accepted, c.lines, bodyText(out.Status, raw))
	default:
		out.Class, out.ConfirmationID, out.Accepted = ClassCommitted, a.ConfirmationID, a.Accepted
	}
}

// coversEachLine reports whether results name every line 0..lines-1 exactly once.
func coversEachLine(results []models.ARILineResult, lines int) bool {
	if len(results) != lines {
		return false
	}
	seen := make([]bool, lines)
	for _, r := range results {
		if r.Line < 0 || r.Line >= lines || seen[r.Line] {
			return false
		}
		seen[r.Line] = true
	}
	return true
}

// ariErrorClass classifies an error object found inside a 2xx by its code, as the
// status it labels would be.
func ariErrorClass(code string) Class {
	switch code {
	case models.ErrorQuotaExhausted:
		return ClassQuotaExhausted
	case models.ErrorUnauthorized:
		return ClassAuthExpired
	case models.ErrorRateLimited, models.ErrorServer:
		return ClassTransient
	}
	return ClassRejected
}

func (paritySync) readBack(ctx context.Context, r reader, property string, from, to models.Date) (models.ARIState, error) {
	q := url.Values{"property_id": {property}, "from": {from.String()}, "to": {to.String()}}
	var st models.ARIState
	err := r.get(ctx, "read "+r.ch.cfg.Slug+" state", ariPath, q, func(b []byte) error { return json.Unmarshal(b, &st) })
	return st, err
}

// ariMessage is the channel's own explanation, or the start of its body.
func ariMessage(status int, e models.ARIError, raw []byte) string {
	switch {
	case e.Message != "" && e.Error != "":
		return truncate(e.Error + ": " + e.Message)
	case e.Message != "":
		return truncate(e.Message)
	case e.Error != "":
		return e.Error
	}
	return bodyText(status, raw)
}
