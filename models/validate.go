package models

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// DefaultPropertyPattern is the property id format the PMS emits unless configured
// otherwise.
const DefaultPropertyPattern = `^prop_[0-9a-f]{8}$`

// Bounds of the values a mutation may carry.
const (
	MaxInventory = 999
	// MaxStayNights bounds min/max length of stay: no channel takes a restriction of
	// more than a year, so anything larger is a PMS bug, not a policy.
	MaxStayNights = 365
	// MaxAmountWholeDigits bounds an amount the way channels store it: at most 8
	// digits before the point. Places after it follow the currency (MinorUnits).
	MaxAmountWholeDigits = 8
	// MaxMutationIDLength bounds a mutation id on the wire (RuleIDFormat): it keys
	// the outcomes index, travels in every workflow input and answer, and names a
	// change in a URL path, so it is short and needs no escaping.
	MaxMutationIDLength = 128
	// MaxStoredIDLength bounds the id a mutation carries inside paritysync: the
	// wire id and the tenant prefix intake adds (tenant ":" id), or a batch's own
	// "batch#index" name, far below the 2,704 bytes a PostgreSQL btree entry holds.
	MaxStoredIDLength = 256
	// MaxPropertyIDLength bounds property_id whatever PARITYSYNC_PROPERTY_PATTERN
	// allows: it keys the cells table.
	MaxPropertyIDLength = 64
	// MaxCorrelationIDLength bounds correlation_id, in characters.
	MaxCorrelationIDLength = 128
	// MaxVersion is the ceiling of a version: 2100-01-01T00:00:00Z in Unix
	// nanoseconds. A PMS versioning cells by a millisecond or a nanosecond clock
	// (or a counter) stays far below it, and one row cannot hold a cell at a
	// version no later update reaches (2^63-1 would supersede every update after it).
	MaxVersion int64 = 4102444800000000000
	// MaxUpdateBytes bounds the encoded mutations of one workflow input or update
	// (a smoother update, an inline batch): half Temporal's default 2 MiB payload
	// limit. With every field bounded, MaxInlineMutations mutations fit in it
	// (TestWorstCaseMutationsFitAnUpdate), so the bound only bites on input that
	// bypassed validation.
	MaxUpdateBytes = 1 << 20
)

// FieldError is one problem with one field of a mutation; Field is the json name so
// the PMS can point at the offending input.
type FieldError struct {
	Field string `json:"field"`
	Rule  string `json:"rule"`
}

// Error is "field: rule".
func (e FieldError) Error() string { return e.Field + ": " + e.Rule }

// ValidationError lists every problem of a mutation, so the PMS can fix them all in
// one round trip instead of one per attempt.
type ValidationError []FieldError

// Error joins all problems with "; ".
func (ve ValidationError) Error() string {
	parts := make([]string, len(ve))
	for i, e := range ve {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap exposes each FieldError to errors.As and errors.Is.
func (ve ValidationError) Unwrap() []error {
	errs := make([]error, len(ve))
	for i, e := range ve {
		errs[i] = e
	}
	return errs
}

// Err is ve as an error, nil when there is no problem. A nil ValidationError stored
// in an error interface is not a nil error; Err avoids that trap.
func (ve ValidationError) Err() error {
	if len(ve) == 0 {
		return nil
	}
	return ve
}

// Has reports whether ve holds the given field and rule; handy for callers that map
// problems to outcomes, and for tests.
func (ve ValidationError) Has(field, rule string) bool {
	for _, e := range ve {
		if e.Field == field && e.Rule == rule {
			return true
		}
	}
	return false
}

// Rules reported by Validate. They are constants so callers and tests can match on
// them without copying strings.
const (
	RuleRequired         = "required"
	RulePropertyPattern  = "must match the property id pattern"
	RuleRoomTypeCode     = "must be 2-16 characters of [A-Z0-9_]"
	RuleRatePlanCode     = "must be 2-24 characters of [A-Z0-9_]"
	RuleChannelUnknown   = "must be a configured channel"
	RuleNotPast          = "must not be before today at the property"
	RuleWithinHorizon    = "must be within the channel's horizon"
	RuleAmountPositive   = "must be > 0"
	RuleAmountPlaces     = "must have no more decimal places than the currency's minor units (JPY 0, EUR 2, KWD 3)"
	RuleAmountDigits     = "must have at most 8 digits before the decimal point"
	RuleCurrencyWithAmt  = "required with amount"
	RuleCurrencyISO      = "must be an active ISO 4217 code"
	RuleCurrencyNoAmount = "must not be set without amount"
	RuleInventoryRange   = "must be in 0..999"
	RuleLOSRange         = "must be in 1..365"
	RuleMinLEMax         = "must be <= max_los"
	RuleVersion          = "must be >= 1"
	RuleVersionMax       = "must be at most 4102444800000000000 (2100-01-01 in Unix nanoseconds)"
	RuleIDStored         = "must be at most 256 printable ASCII characters"
	RulePropertyLength   = "must be at most 64 characters"
	RuleCorrelationID    = "must be at most 128 characters, none a control character"
	RulePriority         = "must be 1..5 or absent"
	RuleNothingToChange  = "must change at least one of amount, inventory, stop_sell, min_los, max_los, cta, ctd"
	RuleChannexUnmapped  = "must be mapped to a Channex id in the channel's channex configuration"
	RuleChannexCurrency  = "must be the currency of the Channex property's rate plans"
	// RuleProtocolCodeLength: the channel's protocol cannot carry a code this long
	// (Protocol.CodeLimits).
	RuleProtocolCodeLength = "must be no longer than the channel's protocol allows (opentravel: 16 characters for property_id and room_type_code, 64 for rate_plan_code)"
)

// FieldMutation names the mutation as a whole in a FieldError whose problem is not
// one field's.
const FieldMutation = "mutation"

// Validator checks mutations against the configured channels and property id format.
// Its clock is injected so "today" is testable and, in workflows, deterministic.
type Validator struct {
	PropertyPattern *regexp.Regexp
	Channels        map[string]ChannelConfig
	Now             func() time.Time
	// Zones gives each property its "today"; the zero value is UTC everywhere.
	Zones PropertyZones
}

// NewValidator builds a Validator; an empty propertyPattern means
// DefaultPropertyPattern and a nil now means time.Now.
func NewValidator(channels []ChannelConfig, propertyPattern string, now func() time.Time) (*Validator, error) {
	if propertyPattern == "" {
		propertyPattern = DefaultPropertyPattern
	}
	re, err := regexp.Compile(propertyPattern)
	if err != nil {
		return nil, fmt.Errorf("property id pattern: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	return &Validator{PropertyPattern: re, Channels: ChannelMap(channels), Now: now}, nil
}

// Validate returns every problem of m at once, in field order; nil when m is valid.
// It returns the concrete type so callers can inspect the fields; use Err to get an
// error value.
func (v *Validator) Validate(m Mutation) ValidationError {
	var ve ValidationError
	add := func(field, rule string) { ve = append(ve, FieldError{Field: field, Rule: rule}) }

	switch {
	case m.ID == "":
		add("id", RuleRequired)
	case !validStoredID(m.ID):
		add("id", RuleIDStored)
	}
	switch {
	case m.PropertyID == "":
		add("property_id", RuleRequired)
	case len(m.PropertyID) > MaxPropertyIDLength:
		add("property_id", RulePropertyLength)
	case !v.propertyPattern().MatchString(m.PropertyID):
		add("property_id", RulePropertyPattern)
	}
	if !isCode(m.RoomTypeCode, 2, 16) {
		add("room_type_code", RuleRoomTypeCode)
	}
	if !isCode(m.RatePlanCode, 2, 24) {
		add("rate_plan_code", RuleRatePlanCode)
	}
	ch, known := v.Channels[m.Channel]
	switch {
	case m.Channel == "":
		add("channel", RuleRequired)
	case !known:
		add("channel", RuleChannelUnknown)
	}
	// stay_date, or a range from/to with days (ranges.go).
	v.rangeProblems(m, ch, known, add)
	m.Values.problems(add)
	switch {
	case m.Version < 1:
		add("version", RuleVersion)
	case m.Version > MaxVersion:
		add("version", RuleVersionMax)
	}
	if m.Priority < 0 || m.Priority > PriorityBulk {
		add("priority", RulePriority)
	}
	if !validCorrelationID(m.CorrelationID) {
		add("correlation_id", RuleCorrelationID)
	}
	if known {
		for _, p := range ch.Protocol.CodeLimits().Problems(m) {
			// A code already refused by its own rule needs no second reason.
			if !slices.ContainsFunc(ve, func(e FieldError) bool { return e.Field == p.Field }) {
				add(p.Field, p.Rule)
			}
		}
	}
	if known && ch.Protocol == ProtocolChannex {
		for _, p := range ch.Channex.Problems(m) {
			add(p.Field, p.Rule)
		}
	}
	// Currency alone changes nothing, so it does not count as a value here.
	if m.Values.changesNothing() {
		add(FieldMutation, RuleNothingToChange)
	}
	return ve
}

func (v *Validator) propertyPattern() *regexp.Regexp {
	if v.PropertyPattern == nil {
		return defaultPropertyRE()
	}
	return v.PropertyPattern
}

func (v *Validator) now() time.Time {
	if v.Now == nil {
		return time.Now()
	}
	return v.Now()
}

var defaultPropertyRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(DefaultPropertyPattern)
})

// ValidMutationID reports whether id keeps the wire rule of a mutation id
// (RuleIDFormat): 1..MaxMutationIDLength characters of A-Z a-z 0-9 . _ : @ ~ -,
// the first a letter or digit (so "." and ".." never name a path segment).
func ValidMutationID(id string) bool {
	if len(id) == 0 || len(id) > MaxMutationIDLength || !isAlnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && !strings.ContainsRune("._:@~-", rune(c)) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validStoredID reports whether id is at most MaxStoredIDLength bytes of printable
// ASCII: what the outcomes index and the workflows carry safely.
func validStoredID(id string) bool {
	if len(id) > MaxStoredIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// validCorrelationID reports whether s is at most MaxCorrelationIDLength
// characters, none a control character.
func validCorrelationID(s string) bool {
	return utf8.RuneCountInString(s) <= MaxCorrelationIDLength && !strings.ContainsFunc(s, unicode.IsControl)
}

// isCode reports whether s is min..max characters of [A-Z0-9_]; a byte loop, because
// channels reject lower case and anything non-ASCII alike.
func isCode(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// decimalDigits counts the significant decimal places and the digits before the
// point of d, ignoring trailing zeros ("120.50" has 1 place, 3 whole digits).
// It works on the coefficient and exponent instead of String so a huge exponent
// costs nothing.
func decimalDigits(d decimal.Decimal) (places, whole int) {
	coef := d.Coefficient()
	if coef.Sign() == 0 {
		return 0, 0
	}
	s := strings.TrimPrefix(coef.String(), "-")
	exp := int64(d.Exponent())
	trimmed := strings.TrimRight(s, "0")
	exp += int64(len(s) - len(trimmed))
	n := int64(len(trimmed))
	if exp < 0 {
		places = int(min(-exp, 1<<31))
	}
	if w := n + exp; w > 0 {
		whole = int(min(w, 1<<31))
	}
	return places, whole
}

// ApplyDefaults fills what the PMS may leave out. Priority: a stop-sell or zero
// inventory is urgent even inside a full sync, because until it lands the channel
// can sell a room the hotel no longer has; a full sync is bulk; anything else is
// default. newID makes the correlation id (a uuid in production, fixed in tests);
// with a nil newID the correlation id stays as it is.
func (m *Mutation) ApplyDefaults(newID func() string) {
	if m.Priority == 0 {
		m.Priority = m.defaultPriority()
	}
	if m.CorrelationID == "" && newID != nil {
		m.CorrelationID = newID()
	}
}

func (m Mutation) defaultPriority() int {
	switch {
	case m.Values.urgent():
		return PriorityUrgent
	case m.FullSync:
		return PriorityBulk
	}
	return PriorityDefault
}

// EffectivePriority is the priority m is sent at: m.Priority, or the default
// ApplyDefaults would give it.
func (m Mutation) EffectivePriority() int { return m.effectivePriority() }

// effectivePriority is m.Priority, or the default ApplyDefaults would give, so a
// caller that skipped ApplyDefaults never gets a priority 0 ahead of urgent work.
func (m Mutation) effectivePriority() int {
	if m.Priority == 0 {
		return m.defaultPriority()
	}
	return m.Priority
}

//go:embed iso4217.txt
var iso4217List string

var currencyCodes = sync.OnceValue(func() map[string]bool {
	set := make(map[string]bool, 160)
	for line := range strings.Lines(iso4217List) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, code := range strings.Fields(line) {
			set[code] = true
		}
	}
	return set
})

// IsCurrencyCode reports whether code is an active ISO 4217 currency a room can be
// priced in (upper case, as on the wire).
func IsCurrencyCode(code string) bool { return currencyCodes()[code] }
