package models

// HTTP headers of the channel wire contract, shared by the simulator and the client.
const (
	HeaderIdempotencyKey     = "X-Idempotency-Key"
	HeaderCorrelationID      = "X-Correlation-ID"
	HeaderConfirmationID     = "X-OTA-Confirmation-ID"
	HeaderRateLimitLimit     = "X-RateLimit-Limit"
	HeaderRateLimitRemaining = "X-RateLimit-Remaining"
	HeaderRateLimitReset     = "X-RateLimit-Reset"
	HeaderRetryAfter         = "Retry-After"
	// HeaderUnitVersions lists, comma-separated, the version of each change object
	// or message of a Channex or OpenTravel request, whose bodies have no place for
	// it. Channels ignore it; otasim uses it to keep its per-night version check on
	// every protocol.
	HeaderUnitVersions = "X-Paritysync-Versions"
)

// Error codes a channel puts in ARIError.Error.
const (
	ErrorInvalid        = "invalid"
	ErrorQuotaExhausted = "quota_exhausted"
	// ErrorUnauthorized, ErrorRateLimited and ErrorServer label 401, 429 and 5xx
	// bodies; clients classify by status, these only make the bodies readable.
	ErrorUnauthorized = "unauthorized"
	ErrorRateLimited  = "rate_limited"
	ErrorServer       = "server_error"
)

// Line statuses in a 207 response.
const (
	LineOK    = "ok"
	LineError = "error"
)

// ARIRequest is the body of POST /{channel}/ari.
type ARIRequest struct {
	PropertyID string    `json:"property_id"`
	Family     Family    `json:"family"`
	Lines      []ARILine `json:"lines"`
}

// ARILine sets the same values on every night from From to To, inclusive, of one room
// type and rate plan. Absent fields are not changed.
type ARILine struct {
	RoomTypeCode string `json:"room_type_code"`
	RatePlanCode string `json:"rate_plan_code"`
	From         Date   `json:"from"`
	To           Date   `json:"to"`
	Values
	Version int64 `json:"version"`
	// Days, when set, keeps only those days of the week of From..To (a channel
	// that takes a days pattern: Protocol.TakesDays); the zero set is every night.
	Days Weekdays `json:"days,omitzero"`
}

// Nights is the number of stay dates from From to To (Days aside).
func (l ARILine) Nights() int { return l.To.DaysSince(l.From) + 1 }

// Covers reports whether the line sets night d: within From..To and on one of
// its Days.
func (l ARILine) Covers(d Date) bool {
	return !d.Before(l.From) && !d.After(l.To) && l.Days.Has(d.Time().Weekday())
}

// ARIAccepted is the 200 response body.
type ARIAccepted struct {
	ConfirmationID string `json:"confirmation_id"`
	Accepted       int    `json:"accepted"`
}

// ARIPartial is the 207 response body: one result per request line.
type ARIPartial struct {
	ConfirmationID string          `json:"confirmation_id"`
	Results        []ARILineResult `json:"results"`
}

// ARILineResult is the fate of one line (0-based index) of a 207 response.
type ARILineResult struct {
	Line    int    `json:"line"`
	Status  string `json:"status"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// ARIError is the body of a 4xx response.
type ARIError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// ARICell is one night of one room type and rate plan as the channel holds it.
type ARICell struct {
	RoomTypeCode string `json:"room_type_code"`
	RatePlanCode string `json:"rate_plan_code"`
	Date         Date   `json:"date"`
	Values
	Version int64 `json:"version"`
}

// ARIState is the body of GET /{channel}/ari?property_id=&from=&to=.
type ARIState struct {
	PropertyID string    `json:"property_id"`
	Cells      []ARICell `json:"cells"`
}
