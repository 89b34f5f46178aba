// Package wire holds the wire types of the Channex API and of OpenTravel 2003/05,
// the two channel protocols paritysync speaks besides its own generic JSON (whose
// ARIRequest and ARILine stay in models: every layer uses the line as the unit of
// a channel request). The clients in channels/ and the simulator in otasim/ both
// use them from here.
package wire

import (
	"encoding/json"

	"github.com/paritysync/paritysync/models"
)

// Wire types of the Channex API (https://docs.channex.io), shared by the client in
// channels/ and the simulator.

// Channex paths, under the channel's base.
const (
	ChannexRestrictionsPath = "/api/v1/restrictions"
	ChannexAvailabilityPath = "/api/v1/availability"
	// ChannexAPIKeyHeader carries the API key.
	ChannexAPIKeyHeader = "user-api-key"
	// ChannexTooManyRequests is the error code of Channex's 429 body.
	ChannexTooManyRequests = "http_too_many_requests"
	// ChannexMaxBodyBytes is the largest update Channex takes in one call.
	ChannexMaxBodyBytes = 10 << 20
)

// ChannexValues is the body of both ARI updates: change objects, applied in order.
type ChannexValues[T any] struct {
	Values []T `json:"values"`
}

// ChannexRestriction is one change object of POST /api/v1/restrictions: a rate and
// restrictions of one rate plan on Date, or on DateFrom..DateTo (optionally only on
// Days). Absent fields are not changed. Rate is a decimal string in the rate plan's
// currency.
type ChannexRestriction struct {
	PropertyID        string      `json:"property_id"`
	RatePlanID        string      `json:"rate_plan_id"`
	Date              models.Date `json:"date,omitzero"`
	DateFrom          models.Date `json:"date_from,omitzero"`
	DateTo            models.Date `json:"date_to,omitzero"`
	Days              []string    `json:"days,omitempty"`
	Rate              string      `json:"rate,omitempty"`
	MinStayArrival    *int        `json:"min_stay_arrival,omitempty"`
	MinStayThrough    *int        `json:"min_stay_through,omitempty"`
	MaxStay           *int        `json:"max_stay,omitempty"`
	ClosedToArrival   *bool       `json:"closed_to_arrival,omitempty"`
	ClosedToDeparture *bool       `json:"closed_to_departure,omitempty"`
	StopSell          *bool       `json:"stop_sell,omitempty"`
}

// ChannexAvailability is one change object of POST /api/v1/availability.
type ChannexAvailability struct {
	PropertyID   string      `json:"property_id"`
	RoomTypeID   string      `json:"room_type_id"`
	Date         models.Date `json:"date,omitzero"`
	DateFrom     models.Date `json:"date_from,omitzero"`
	DateTo       models.Date `json:"date_to,omitzero"`
	Availability *int        `json:"availability"`
}

// ChannexResponse is the answer to an ARI update: one background task per property
// in Data, refused change objects in Meta.Warnings (still 200), or Errors.
type ChannexResponse struct {
	Data   []ChannexTask `json:"data,omitempty"`
	Meta   *ChannexMeta  `json:"meta,omitempty"`
	Errors *ChannexError `json:"errors,omitempty"`
}

// ChannexTask references the background task that applies an update.
type ChannexTask struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// ChannexMeta carries the message and the change objects that were refused.
type ChannexMeta struct {
	Message  string           `json:"message,omitempty"`
	Warnings []ChannexWarning `json:"warnings,omitempty"`
}

// ChannexWarning names a refused change object by its ids and dates, and why.
type ChannexWarning struct {
	PropertyID string      `json:"property_id,omitempty"`
	RatePlanID string      `json:"rate_plan_id,omitempty"`
	RoomTypeID string      `json:"room_type_id,omitempty"`
	Date       models.Date `json:"date,omitzero"`
	DateFrom   models.Date `json:"date_from,omitzero"`
	DateTo     models.Date `json:"date_to,omitzero"`
	// Warning is a message, or an object of field: [messages].
	Warning json.RawMessage `json:"warning,omitempty"`
}

// ChannexError is the body of a refused call: 401, 422, 429.
type ChannexError struct {
	Code    string          `json:"code"`
	Title   string          `json:"title"`
	Details json.RawMessage `json:"details,omitempty"`
}

// ChannexRestrictionsState is the body of GET /api/v1/restrictions: per rate plan
// id, per date, the values asked for in filter[restrictions].
type ChannexRestrictionsState struct {
	Data map[string]map[models.Date]ChannexDay `json:"data"`
}

// ChannexDay is one rate plan's values on one date.
type ChannexDay struct {
	Rate              string `json:"rate,omitempty"`
	MinStayArrival    *int   `json:"min_stay_arrival,omitempty"`
	MaxStay           *int   `json:"max_stay,omitempty"`
	ClosedToArrival   *bool  `json:"closed_to_arrival,omitempty"`
	ClosedToDeparture *bool  `json:"closed_to_departure,omitempty"`
	StopSell          *bool  `json:"stop_sell,omitempty"`
}

// ChannexAvailabilityState is the body of GET /api/v1/availability: per room type
// id, per date, the availability.
type ChannexAvailabilityState struct {
	Data map[string]map[models.Date]int `json:"data"`
}

// ChannexReadRestrictions lists what paritysync reads back through
// filter[restrictions].
const ChannexReadRestrictions = "rate,min_stay_arrival,max_stay,closed_to_arrival,closed_to_departure,stop_sell"
