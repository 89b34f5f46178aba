package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/paritysync/paritysync/models"
)

// problem is an RFC 9457 problem document. Extension members: Problems names each
// field and rule, Changes answers a webhook post per change.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	Line     int    `json:"line,omitempty"`
	// Field names the header or parameter a problem is about (Idempotency-Key,
	// mutation); Rule is its rule.
	Field    string              `json:"field,omitempty"`
	Rule     string              `json:"rule,omitempty"`
	Problems []models.RowProblem `json:"problems,omitempty"`
	// RetryAfter repeats the Retry-After header in seconds.
	RetryAfter int            `json:"retry_after,omitempty"`
	Changes    []changeResult `json:"changes,omitempty"`
	// CallbackEventID is a webhook post's callback event (callback_url).
	CallbackEventID string `json:"callback_event_id,omitempty"`
	BatchID         string `json:"batch_id,omitempty"`
}

// problemBase prefixes the problem types; the README documents each.
const problemBase = "https://paritysync.dev/problems/"

// Problem types.
const (
	probUnreadable   = "unreadable-body"
	probInvalid      = "invalid-mutations"
	probTooLarge     = "body-too-large"
	probUnauthorized = "unauthorized"
	probForbidden    = "forbidden"
	probNotFound     = "not-found"
	probConflict     = "idempotency-key-reused"
	probSmootherFull = "smoother-full"
	probQuota        = "quota-exhausted"
	probBackoff      = "channel-backoff"
	probBadRequest   = "bad-request"
	probMediaType    = "unsupported-media-type"
	probSlowBody     = "body-too-slow"
	probUnavailable  = "unavailable"
	probInternal     = "internal"
)

var problemTitles = map[string]string{
	probUnreadable:   "The body cannot be read as mutations",
	probInvalid:      "No mutation of the body is valid",
	probTooLarge:     "The body is larger than this endpoint takes",
	probUnauthorized: "A valid API key is required",
	probForbidden:    "This operation takes an operator key",
	probNotFound:     "No such resource",
	probConflict:     "The Idempotency-Key was used with another body",
	probSmootherFull: "The channel's smoother is full",
	probQuota:        "The channel's daily quota cannot absorb the change",
	probBackoff:      "The channel asked to be called later",
	probBadRequest:   "The request is malformed",
	probMediaType:    "The body is not JSON or JSON lines",
	probSlowBody:     "The body did not arrive in time",
	probUnavailable:  "A dependency did not answer",
	probInternal:     "Internal error",
}

// writeProblem answers p as application/problem+json.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, kind, detail string, edit ...func(*problem)) {
	p := problem{Type: problemBase + kind, Title: problemTitles[kind], Status: status, Detail: detail, Instance: r.URL.Path}
	for _, e := range edit {
		e(&p)
	}
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON answers v as application/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// retrySeconds rounds d up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
