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

func (paritySync) interpret(out *PushResponse, _ call, h http.Header, raw []byte) {
	var apiErr models.ARIError
	_ = json.Unmarshal(raw, &apiErr) // absent or foreign bodies just leave it empty
	out.Message = ariMessage(out.Status, apiErr, raw)

	switch status := out.Status; {
	case status == http.StatusMultiStatus:
		var p models.ARIPartial
		if err := json.Unmarshal(raw, &p); err != nil || len(p.Results) == 0 {
			// Which lines applied is unknown; a retry under the same idempotency
			// key is safe and may get a readable answer.
			out.Class, out.Message = ClassTransient, "unreadable 207 answer"
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
	case is2xx(status):
		var a models.ARIAccepted
		_ = json.Unmarshal(raw, &a) // the header alone is enough to confirm
		out.Class, out.ConfirmationID, out.Accepted = ClassCommitted, a.ConfirmationID, a.Accepted
		if out.ConfirmationID == "" {
			out.ConfirmationID = h.Get(models.HeaderConfirmationID)
		}
	case status == http.StatusBadRequest && apiErr.Error == models.ErrorQuotaExhausted:
		out.Class = ClassQuotaExhausted
	default:
		out.Class = byStatus(status, out.ServerWait)
	}
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
