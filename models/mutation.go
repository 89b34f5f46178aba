package models

// Family is an endpoint family of a channel: each takes its own requests.
type Family string

// The endpoint families, in the order requests for one property are built.
const (
	FamilyRates        Family = "rates"
	FamilyAvailability Family = "availability"
	FamilyRestrictions Family = "restrictions"
)

// Families lists every endpoint family in a fixed order: familyTable's.
var Families = func() []Family {
	fs := make([]Family, len(familyTable))
	for i, d := range familyTable {
		fs[i] = d.family
	}
	return fs
}()

// Priorities: 1 is urgent, 5 is bulk.
const (
	PriorityUrgent  = 1
	PriorityDefault = 3
	PriorityBulk    = 5
)

// Mutation is one change for one cell from the PMS. Its Values are optional: nil
// means "not changed". Values of one family travel as a whole: a mutation that sets
// any restriction states every restriction it wants the channel to hold.
type Mutation struct {
	ID           string `json:"id"`
	PropertyID   string `json:"property_id"`
	RoomTypeCode string `json:"room_type_code"`
	RatePlanCode string `json:"rate_plan_code"`
	Channel      string `json:"channel"`
	StayDate     Date   `json:"stay_date"`
	// From and To (inclusive) give a range of nights instead of StayDate; Days,
	// when set, keeps only those days of the week of it. PrepareBatch expands a
	// range into its nights (Validator.Expand), each under the mutation's id.
	From Date     `json:"from,omitzero"`
	To   Date     `json:"to,omitzero"`
	Days Weekdays `json:"days,omitzero"`
	// RangeNights is set on the nights Expand makes of a range mutation: how many
	// nights the range has after clipping. Never on the wire.
	RangeNights int `json:"-"`
	Values
	Version       int64  `json:"version"`
	Priority      int    `json:"priority,omitempty"`
	FullSync      bool   `json:"full_sync,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Cell is the unit of parity: one channel's value for one room, rate plan and night.
type Cell struct {
	Channel      string `json:"channel"`
	PropertyID   string `json:"property_id"`
	RoomTypeCode string `json:"room_type_code"`
	RatePlanCode string `json:"rate_plan_code"`
	StayDate     Date   `json:"stay_date"`
}

// Cell is the cell m changes.
func (m Mutation) Cell() Cell {
	return Cell{Channel: m.Channel, PropertyID: m.PropertyID, RoomTypeCode: m.RoomTypeCode,
		RatePlanCode: m.RatePlanCode, StayDate: m.StayDate}
}

// Outcome is what finally happened to a mutation (or one family's part of it).
type Outcome string

// The outcomes; every mutation ends in exactly one.
const (
	OutcomeCommitted    Outcome = "committed"
	OutcomeSuperseded   Outcome = "superseded"
	OutcomeRejected     Outcome = "rejected"
	OutcomeDeadLettered Outcome = "dead-lettered"
	// OutcomeCancelled is the outcome of what was still waiting when the operator
	// cancelled its batch.
	OutcomeCancelled Outcome = "cancelled"
)

// Outcomes lists every outcome.
var Outcomes = []Outcome{OutcomeCommitted, OutcomeSuperseded, OutcomeRejected, OutcomeDeadLettered, OutcomeCancelled}
