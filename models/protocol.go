package models

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Protocol is the wire protocol a channel speaks.
type Protocol string

// The protocols paritysync speaks.
const (
	// ProtocolParitySync is the generic JSON contract of POST {base}/ari.
	ProtocolParitySync Protocol = "paritysync"
	// ProtocolChannex is the Channex channel manager's JSON API.
	ProtocolChannex Protocol = "channex"
	// ProtocolOpenTravel is the OpenTravel Alliance 2003/05 XML notifications.
	ProtocolOpenTravel Protocol = "opentravel"
)

// Protocols lists every protocol in a fixed order.
var Protocols = []Protocol{ProtocolParitySync, ProtocolChannex, ProtocolOpenTravel}

// HasReadBack reports whether the protocol can read a channel's state back.
func (p Protocol) HasReadBack() bool { return p != ProtocolOpenTravel }

// TakesDays reports whether p's channels take a line over a range with days of the
// week for family f: Channex's restrictions (rates and restrictions, "days"),
// every OpenTravel message (StatusApplicationControl's Mon…Sun). Coalesce then
// sends one line with the days instead of one per run of nights.
func (p Protocol) TakesDays(f Family) bool {
	switch p {
	case ProtocolChannex:
		return f != FamilyAvailability
	case ProtocolOpenTravel:
		return true
	}
	return false
}

// CodeLimits are the longest property id, room type code and rate plan code a
// protocol can carry, in characters; 0 is no limit beyond paritysync's own.
type CodeLimits struct {
	Property, RoomType, RatePlan int
}

// CodeLimits are p's limits. OpenTravel's schemas (2003B and 2017B) make HotelCode
// and InvTypeCode StringLength1to16 and StatusApplicationControl's RatePlanCode
// StringLength1to64; the generic contract and Channex (which maps codes to its own
// ids) have none.
func (p Protocol) CodeLimits() CodeLimits {
	if p == ProtocolOpenTravel {
		return CodeLimits{Property: 16, RoomType: 16, RatePlan: 64}
	}
	return CodeLimits{}
}

// Problems lists the codes of mu longer than the limits allow, by field.
func (l CodeLimits) Problems(mu Mutation) []FieldError {
	var out []FieldError
	for _, f := range []struct {
		field, code string
		max         int
	}{
		{"property_id", mu.PropertyID, l.Property},
		{"room_type_code", mu.RoomTypeCode, l.RoomType},
		{"rate_plan_code", mu.RatePlanCode, l.RatePlan},
	} {
		if f.max > 0 && utf8.RuneCountInString(f.code) > f.max {
			out = append(out, FieldError{Field: f.field, Rule: RuleProtocolCodeLength})
		}
	}
	return out
}

// Channex publishes its limits per property: this many price-and-restriction
// requests, and as many availability requests, in any minute.
const ChannexRequestsPerMinute = 10

// ChannexEndpoint is the Channex endpoint that carries family f: prices and
// restrictions share /restrictions (and its limit), availability has its own.
func ChannexEndpoint(f Family) string {
	if e := channexEndpoints.Of(f); e != "" {
		return e
	}
	return ChannexRestrictions
}

// The Channex endpoints.
const (
	ChannexRestrictions = "restrictions"
	ChannexAvailability = "availability"
)

var channexEndpoints = ByFamily[string]{Rates: ChannexRestrictions, Availability: ChannexAvailability,
	Restrictions: ChannexRestrictions}

// ChannexMapping maps paritysync codes to Channex ids, per property.
type ChannexMapping struct {
	// Properties is keyed by our property id.
	Properties map[string]ChannexProperty `yaml:"properties" json:"properties,omitempty"`
}

// ChannexProperty is one property's Channex ids.
type ChannexProperty struct {
	// PropertyID is the Channex property UUID.
	PropertyID string `yaml:"property_id" json:"property_id"`
	// Currency is the currency of the property's rate plans: Channex takes a bare
	// rate, so an amount in another currency cannot be sent.
	Currency string `yaml:"currency" json:"currency"`
	// RoomTypes maps a room type code to its Channex room type UUID.
	RoomTypes map[string]string `yaml:"room_types" json:"room_types"`
	// RatePlans maps "ROOM/PLAN" (room type code / rate plan code) to the Channex
	// rate plan UUID: a Channex rate plan belongs to one room type.
	RatePlans map[string]string `yaml:"rate_plans" json:"rate_plans"`
}

// IsZero reports whether no property is mapped.
func (m ChannexMapping) IsZero() bool { return len(m.Properties) == 0 }

// OpenTravelMapping maps paritysync codes to a channel's OpenTravel codes, per
// property; a property, room type or rate plan it does not map is sent under
// paritysync's own code. The YAML seeds it (opentravel.properties of a channel);
// the API (PUT /v1/properties/{id}/channels) sets a property's codes over it.
type OpenTravelMapping struct {
	// Properties is keyed by our property id.
	Properties map[string]OpenTravelProperty `yaml:"properties" json:"properties,omitempty"`
}

// IsZero reports whether no property is mapped.
func (m OpenTravelMapping) IsZero() bool { return len(m.Properties) == 0 }

// OpenTravelProperty is one property's codes on an OpenTravel channel.
type OpenTravelProperty struct {
	// HotelCode is the property's HotelCode.
	HotelCode string `yaml:"hotel_code" json:"hotel_code"`
	// RoomTypes maps a room type code to its InvTypeCode.
	RoomTypes map[string]string `yaml:"room_types" json:"room_types,omitempty"`
	// RatePlans maps "ROOM/PLAN" (room type code / rate plan code) to its
	// RatePlanCode.
	RatePlans map[string]string `yaml:"rate_plans" json:"rate_plans,omitempty"`
}

// Problem is the first field of p (hotel_code, room_types.<code>,
// rate_plans.<key>) that breaks its rule, and the rule; "" when p is sound. The
// codes keep to OpenTravel's lengths (CodeLimits) and hold no control character.
func (p OpenTravelProperty) Problem() (field, rule string) {
	lim := ProtocolOpenTravel.CodeLimits()
	ok := func(code string, max int) bool {
		n := utf8.RuneCountInString(code)
		return n >= 1 && n <= max && !strings.ContainsFunc(code, unicode.IsControl)
	}
	if !ok(p.HotelCode, lim.Property) {
		return "hotel_code", fmt.Sprintf("must be 1-%d characters, no control character", lim.Property)
	}
	for _, room := range sortedKeys(p.RoomTypes) {
		switch {
		case !isCode(room, 2, 16):
			return "room_types." + room, RuleRoomTypeCode
		case !ok(p.RoomTypes[room], lim.RoomType):
			return "room_types." + room, fmt.Sprintf("must be 1-%d characters, no control character", lim.RoomType)
		}
	}
	for _, key := range sortedKeys(p.RatePlans) {
		_, plan, found := strings.Cut(key, "/")
		switch {
		case !found || !isCode(plan, 2, 24):
			return "rate_plans." + key, "key must be ROOM/PLAN (room type code / rate plan code)"
		case !ok(p.RatePlans[key], lim.RatePlan):
			return "rate_plans." + key, fmt.Sprintf("must be 1-%d characters, no control character", lim.RatePlan)
		}
	}
	return "", ""
}

// RatePlanKey is the RatePlans key of a room type and rate plan.
func RatePlanKey(room, plan string) string { return room + "/" + plan }

// RoomTypeID is the Channex room type id of our property and room type code.
func (m ChannexMapping) RoomTypeID(property, room string) (string, bool) {
	id, ok := m.Properties[property].RoomTypes[room]
	return id, ok
}

// RatePlanID is the Channex rate plan id of our property, room type and rate plan.
func (m ChannexMapping) RatePlanID(property, room, plan string) (string, bool) {
	id, ok := m.Properties[property].RatePlans[RatePlanKey(room, plan)]
	return id, ok
}

// Problems lists what keeps mutation mu from being sent to Channex: an unmapped
// property, room type or rate plan, or an amount in another currency.
func (m ChannexMapping) Problems(mu Mutation) []FieldError {
	p, ok := m.Properties[mu.PropertyID]
	if !ok {
		return []FieldError{{Field: "property_id", Rule: RuleChannexUnmapped}}
	}
	var out []FieldError
	if mu.Sets(FamilyAvailability) {
		if _, ok := p.RoomTypes[mu.RoomTypeCode]; !ok {
			out = append(out, FieldError{Field: "room_type_code", Rule: RuleChannexUnmapped})
		}
	}
	// Availability is per room type on Channex, but the cell is per rate plan: an
	// unmapped plan could never be read back, so every family needs it.
	if _, ok := p.RatePlans[RatePlanKey(mu.RoomTypeCode, mu.RatePlanCode)]; !ok {
		out = append(out, FieldError{Field: "rate_plan_code", Rule: RuleChannexUnmapped})
	}
	if mu.Amount != nil && mu.Currency != "" && mu.Currency != p.Currency {
		out = append(out, FieldError{Field: "currency", Rule: RuleChannexCurrency})
	}
	return out
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// validateProtocol checks the protocol-specific settings of c.
func (c ChannelConfig) validateProtocol() error {
	fail := func(field, rule string, args ...any) error {
		return fmt.Errorf("channel %s: %s: %s", c.Slug, field, fmt.Sprintf(rule, args...))
	}
	if !slices.Contains(Protocols, c.Protocol) {
		return fail("protocol", "must be paritysync, channex or opentravel, got %q", c.Protocol)
	}
	if c.BaseURL != "" {
		if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fail("base_url", "must be an http(s) URL")
		}
	}
	if c.ReadBack && !c.Protocol.HasReadBack() {
		return fail("read_back", "must be false: protocol %s has no read-back", c.Protocol)
	}
	if c.Protocol != ProtocolOpenTravel && !c.OpenTravel.IsZero() {
		return fail("opentravel", "only for protocol opentravel")
	}
	for _, prop := range sortedKeys(c.OpenTravel.Properties) {
		if field, rule := c.OpenTravel.Properties[prop].Problem(); field != "" {
			return fail("opentravel.properties."+prop+"."+field, "%s", rule)
		}
	}
	if c.Protocol != ProtocolChannex {
		if !c.Channex.IsZero() {
			return fail("channex", "only for protocol channex")
		}
		return nil
	}
	if c.Scope != ScopeProperty {
		return fail("scope", "must be property: Channex limits each property")
	}
	// The limiter keeps one window per property and Channex endpoint (WindowOf):
	// prices and restrictions share one, availability has its own.
	if c.RatePerMinute > ChannexRequestsPerMinute {
		return fail("rate_per_minute", "must be at most %d: Channex allows %d requests per property and endpoint in 60 s",
			ChannexRequestsPerMinute, ChannexRequestsPerMinute)
	}
	// A Channex channel may start with no property mapped: properties mapped over
	// the API (PUT /v1/properties/{id}/channels with codes) come from PostgreSQL.
	for _, prop := range sortedKeys(c.Channex.Properties) {
		if field, rule := c.Channex.Properties[prop].Problem(); field != "" {
			return fail("channex.properties."+prop+"."+field, "%s", rule)
		}
	}
	return nil
}

// Problem is the first field of p (property_id, currency, room_types.<code>,
// rate_plans.<key>) that breaks its rule, and the rule; "" when p is sound.
func (p ChannexProperty) Problem() (field, rule string) {
	switch {
	case !uuidRE.MatchString(p.PropertyID):
		return "property_id", "must be a UUID"
	case !IsCurrencyCode(p.Currency):
		return "currency", "must be an active ISO 4217 code"
	case len(p.RoomTypes) == 0:
		return "room_types", "at least one room type must be mapped"
	}
	for _, room := range sortedKeys(p.RoomTypes) {
		if !isCode(room, 2, 16) {
			return "room_types." + room, RuleRoomTypeCode
		}
		if !uuidRE.MatchString(p.RoomTypes[room]) {
			return "room_types." + room, "must be a UUID"
		}
	}
	for _, key := range sortedKeys(p.RatePlans) {
		room, plan, ok := strings.Cut(key, "/")
		switch {
		case !ok || !isCode(plan, 2, 24):
			return "rate_plans." + key, "key must be ROOM/PLAN (room type code / rate plan code)"
		case p.RoomTypes[room] == "":
			return "rate_plans." + key, "room type " + room + " must be in room_types"
		case !uuidRE.MatchString(p.RatePlans[key]):
			return "rate_plans." + key, "must be a UUID"
		}
	}
	return "", ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// NewChannexChannel is a Channex channel with house defaults that fit Channex's
// published limits: per property, at most 5 rates and 5 restrictions requests (10
// on the shared /restrictions endpoint) and 10 availability requests in any 60 s.
// The refill (4.75 and 9.5 a minute) leaves the 11th request of a window at least
// 3 s outside it, because Channex counts arrivals and a request's network delay
// varies.
func NewChannexChannel(slug string, mapping ChannexMapping) ChannelConfig {
	c := NewChannelConfig(slug, ChannexRequestsPerMinute)
	c.Protocol, c.Scope, c.Burst = ProtocolChannex, ScopeProperty, 1
	c.Shares = FamilyShares{Rates: 25, Availability: 50, Restrictions: 25}
	c.Channex = mapping
	return c
}
