package models

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// testNow is a fixed clock: 2026-03-10 23:30 UTC, late in the day so a time-zone
// slip would show up as a wrong "today".
var testNow = func() time.Time { return time.Date(2026, 3, 10, 23, 30, 0, 0, time.UTC) }

// newTestValidator validates for the default channels, on testNow.
func newTestValidator(t testing.TB) *Validator {
	t.Helper()
	return newValidatorFor(t, DefaultChannels(), "")
}

// newValidatorFor validates for chs and the property pattern ("" for the default),
// on testNow.
func newValidatorFor(t testing.TB, chs []ChannelConfig, propertyPattern string) *Validator {
	t.Helper()
	v, err := NewValidator(chs, propertyPattern, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ptr[T any](v T) *T { return &v }

func dec(s string) *decimal.Decimal {
	d := decimal.RequireFromString(s)
	return &d
}

func day(s string) Date {
	d, err := ParseDate(s)
	if err != nil {
		panic(err)
	}
	return d
}

// validMutation changes every family so that clearing one value still leaves a
// valid mutation.
func validMutation() Mutation {
	return Mutation{
		ID: "m-1", PropertyID: "prop_0a1b2c3d", RoomTypeCode: "DLXKING", RatePlanCode: "BAR_FLEX",
		Channel: "booking_com", StayDate: day("2026-03-10"),
		Values:  Values{Amount: dec("129.90"), Currency: "EUR", Inventory: ptr(4), StopSell: ptr(false), MinLOS: ptr(2), MaxLOS: ptr(14), CTA: ptr(false), CTD: ptr(true)},
		Version: 7, Priority: 3,
	}
}

func TestValidateAcceptsValidMutation(t *testing.T) {
	v := newTestValidator(t)
	cases := map[string]func(*Mutation){
		"all families": func(*Mutation) {},
		"rates only": func(m *Mutation) {
			*m = Mutation{ID: m.ID, PropertyID: m.PropertyID, RoomTypeCode: "DB", RatePlanCode: "BB", Channel: "agoda", StayDate: m.StayDate, Values: Values{Amount: dec("99999999"), Currency: "JPY"}, Version: 1}
		},
		"inventory zero":      func(m *Mutation) { m.Inventory = ptr(0) },
		"inventory max":       func(m *Mutation) { m.Inventory = ptr(999) },
		"min equals max los":  func(m *Mutation) { m.MinLOS, m.MaxLOS = ptr(3), ptr(3) },
		"trailing zeros":      func(m *Mutation) { m.Amount = dec("120.5000") },
		"last day of horizon": func(m *Mutation) { m.StayDate = day("2026-03-10").AddDays(730) },
		"priority absent":     func(m *Mutation) { m.Priority = 0 },
		"priority bulk":       func(m *Mutation) { m.Priority = 5 },
		"codes at max length": func(m *Mutation) { m.RoomTypeCode, m.RatePlanCode = "ABCDEFGHIJ_12345", "ABCDEFGHIJKLMNOPQRST_123" },
		"max los only":        func(m *Mutation) { m.MinLOS = nil },
		"amount as integer":   func(m *Mutation) { m.Amount = dec("1e2") },
		"restrictions only":   func(m *Mutation) { m.Amount, m.Currency, m.Inventory = nil, "", nil },
		"availability only": func(m *Mutation) {
			*m = Mutation{ID: "x", PropertyID: m.PropertyID, RoomTypeCode: "DB", RatePlanCode: "BB", Channel: "expedia", StayDate: m.StayDate, Values: Values{Inventory: ptr(1)}, Version: 1}
		},
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			m := validMutation()
			mod(&m)
			if ve := v.Validate(m); ve != nil {
				t.Fatalf("Validate = %v, want no problem", ve)
			}
		})
	}
}

// ruleCase is a change to a valid mutation and the field error it must raise.
type ruleCase struct {
	name  string
	mod   func(*Mutation)
	field string
	rule  string
}

// TestValidateRules covers each rule once: the named change to a valid mutation must
// produce exactly that one field error.
func TestValidateRules(t *testing.T) {
	v := newTestValidator(t)
	cases := []ruleCase{
		{"id required", func(m *Mutation) { m.ID = "" }, "id", RuleRequired},
		{"property required", func(m *Mutation) { m.PropertyID = "" }, "property_id", RuleRequired},
		{"property pattern", func(m *Mutation) { m.PropertyID = "prop_0A1B2C3D" }, "property_id", RulePropertyPattern},
		{"property pattern anchored", func(m *Mutation) { m.PropertyID = "xprop_0a1b2c3d" }, "property_id", RulePropertyPattern},
		{"room type too short", func(m *Mutation) { m.RoomTypeCode = "D" }, "room_type_code", RuleRoomTypeCode},
		{"room type too long", func(m *Mutation) { m.RoomTypeCode = "ABCDEFGHIJ_123456" }, "room_type_code", RuleRoomTypeCode},
		{"room type lower case", func(m *Mutation) { m.RoomTypeCode = "dlxking" }, "room_type_code", RuleRoomTypeCode},
		{"room type empty", func(m *Mutation) { m.RoomTypeCode = "" }, "room_type_code", RuleRoomTypeCode},
		{"rate plan too long", func(m *Mutation) { m.RatePlanCode = "ABCDEFGHIJKLMNOPQRST_1234" }, "rate_plan_code", RuleRatePlanCode},
		{"rate plan dash", func(m *Mutation) { m.RatePlanCode = "BAR-FLEX" }, "rate_plan_code", RuleRatePlanCode},
		{"channel required", func(m *Mutation) { m.Channel = "" }, "channel", RuleRequired},
		{"channel unknown", func(m *Mutation) { m.Channel = "bookingcom" }, "channel", RuleChannelUnknown},
		{"stay date required", func(m *Mutation) { m.StayDate = Date{} }, "stay_date", RuleRequired},
		{"stay date yesterday", func(m *Mutation) { m.StayDate = day("2026-03-09") }, "stay_date", RuleNotPast},
		{"stay date beyond horizon", func(m *Mutation) { m.StayDate = day("2026-03-10").AddDays(731) }, "stay_date", RuleWithinHorizon},
		{"amount zero", func(m *Mutation) { m.Amount = dec("0") }, "amount", RuleAmountPositive},
		{"amount negative", func(m *Mutation) { m.Amount = dec("-10") }, "amount", RuleAmountPositive},
		{"amount three places", func(m *Mutation) { m.Amount = dec("129.905") }, "amount", RuleAmountPlaces},
		{"amount nine whole digits", func(m *Mutation) { m.Amount = dec("100000000") }, "amount", RuleAmountDigits},
		{"amount huge exponent", func(m *Mutation) { m.Amount = dec("1e9000") }, "amount", RuleAmountDigits},
		{"currency required with amount", func(m *Mutation) { m.Currency = "" }, "currency", RuleCurrencyWithAmt},
		{"currency not iso", func(m *Mutation) { m.Currency = "EUD" }, "currency", RuleCurrencyISO},
		{"currency lower case", func(m *Mutation) { m.Currency = "eur" }, "currency", RuleCurrencyISO},
		{"currency withdrawn", func(m *Mutation) { m.Currency = "HRK" }, "currency", RuleCurrencyISO},
		{"currency not payable", func(m *Mutation) { m.Currency = "XAU" }, "currency", RuleCurrencyISO},
		{"currency without amount", func(m *Mutation) { m.Amount = nil }, "currency", RuleCurrencyNoAmount},
		{"inventory negative", func(m *Mutation) { m.Inventory = ptr(-1) }, "inventory", RuleInventoryRange},
		{"inventory above 999", func(m *Mutation) { m.Inventory = ptr(1000) }, "inventory", RuleInventoryRange},
		{"min los zero", func(m *Mutation) { m.MinLOS = ptr(0) }, "min_los", RuleLOSRange},
		{"max los above a year", func(m *Mutation) { m.MaxLOS = ptr(366) }, "max_los", RuleLOSRange},
		{"min los above max los", func(m *Mutation) { m.MinLOS, m.MaxLOS = ptr(5), ptr(4) }, "min_los", RuleMinLEMax},
		{"version zero", func(m *Mutation) { m.Version = 0 }, "version", RuleVersion},
		{"priority six", func(m *Mutation) { m.Priority = 6 }, "priority", RulePriority},
		{"priority negative", func(m *Mutation) { m.Priority = -1 }, "priority", RulePriority},
		{"nothing to change", func(m *Mutation) {
			m.Amount, m.Currency, m.Inventory, m.StopSell, m.MinLOS, m.MaxLOS, m.CTA, m.CTD = nil, "", nil, nil, nil, nil, nil, nil
		}, FieldMutation, RuleNothingToChange},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := validMutation()
			tc.mod(&m)
			ve := v.Validate(m)
			want := ValidationError{{Field: tc.field, Rule: tc.rule}}
			if len(ve) != 1 || ve[0] != want[0] {
				t.Fatalf("Validate = %#v, want %#v", ve, want)
			}
		})
	}
}

func TestValidateHorizonIsPerChannel(t *testing.T) {
	chans := DefaultChannels()
	chans[1].HorizonDays = 30 // expedia
	v := newValidatorFor(t, chans, "")
	m := validMutation()
	m.StayDate = day("2026-03-10").AddDays(31)
	if ve := v.Validate(m); ve != nil {
		t.Fatalf("booking_com: %v", ve)
	}
	m.Channel = "expedia"
	if ve := v.Validate(m); !ve.Has("stay_date", RuleWithinHorizon) || len(ve) != 1 {
		t.Fatalf("expedia: got %v, want only the horizon rule", ve)
	}
}

func TestValidateCustomPropertyPattern(t *testing.T) {
	v := newValidatorFor(t, DefaultChannels(), `^H[0-9]{4}$`)
	m := validMutation()
	m.PropertyID = "H0042"
	if ve := v.Validate(m); ve != nil {
		t.Fatalf("Validate = %v", ve)
	}
	if _, err := NewValidator(nil, "([", nil); err == nil {
		t.Fatal("NewValidator accepted a broken pattern")
	}
}

// TestValidateRefusesCodesLongerThanTheProtocolCarries: OpenTravel's HotelCode is
// at most 16 characters, so a property id the pattern allows but OpenTravel cannot
// carry is refused for an opentravel channel, naming the field, and accepted for a
// generic one.
func TestValidateRefusesCodesLongerThanTheProtocolCarries(t *testing.T) {
	ota := NewChannelConfig("ota_xml", 30)
	ota.Protocol, ota.ReadBack = ProtocolOpenTravel, false
	v := newValidatorFor(t, append(DefaultChannels(), ota), `^[a-z0-9_]{1,40}$`)
	for _, tc := range []struct {
		property, channel string
		want              bool // refused
	}{
		{"prop_0123456789a", "ota_xml", false}, // 16
		{"prop_0123456789ab", "ota_xml", true}, // 17
		{"prop_0123456789ab", "booking_com", false},
	} {
		m := validMutation()
		m.PropertyID, m.Channel = tc.property, tc.channel
		ve := v.Validate(m)
		if got := ve.Has("property_id", RuleProtocolCodeLength); got != tc.want || len(ve) != map[bool]int{true: 1}[tc.want] {
			t.Errorf("%s on %s: %v, want refused %v", tc.property, tc.channel, ve, tc.want)
		}
		if tc.want && !strings.Contains(ve.Error(), "property_id: must be no longer than the channel's protocol allows (opentravel: 16") {
			t.Errorf("error %q does not name the field and the limit", ve.Error())
		}
	}
	// A room type code over 16 is refused once, by its own rule.
	m := validMutation()
	m.Channel, m.RoomTypeCode = "ota_xml", "ROOM_TYPE_CODE_17"
	if ve := v.Validate(m); len(ve) != 1 || !ve.Has("room_type_code", RuleRoomTypeCode) {
		t.Errorf("17-character room type: %v", ve)
	}
	if l := ProtocolOpenTravel.CodeLimits(); l != (CodeLimits{Property: 16, RoomType: 16, RatePlan: 64}) {
		t.Errorf("opentravel limits %+v", l)
	}
	long := Mutation{PropertyID: "p", RoomTypeCode: "R", RatePlanCode: strings.Repeat("P", 65)}
	if ps := ProtocolOpenTravel.CodeLimits().Problems(long); len(ps) != 1 || ps[0].Field != "rate_plan_code" {
		t.Errorf("65-character rate plan: %v", ps)
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	v := newTestValidator(t)
	m := Mutation{
		PropertyID: "hotel-1", RoomTypeCode: "x", RatePlanCode: "BAR", Channel: "trivago",
		StayDate: day("2026-01-01"), Values: Values{Amount: dec("-1.234"), Inventory: ptr(5000), MinLOS: ptr(0)}, Version: 0, Priority: 9,
	}
	ve := v.Validate(m)
	want := ValidationError{
		{"id", RuleRequired},
		{"property_id", RulePropertyPattern},
		{"room_type_code", RuleRoomTypeCode},
		{"channel", RuleChannelUnknown},
		{"stay_date", RuleNotPast},
		{"amount", RuleAmountPositive},
		// No currency: the places cannot be judged, the missing currency is the problem.
		{"currency", RuleCurrencyWithAmt},
		{"inventory", RuleInventoryRange},
		{"min_los", RuleLOSRange},
		{"version", RuleVersion},
		{"priority", RulePriority},
	}
	if len(ve) != len(want) {
		t.Fatalf("got %d problems %v, want %d", len(ve), ve, len(want))
	}
	for i := range want {
		if ve[i] != want[i] {
			t.Errorf("problem %d = %v, want %v", i, ve[i], want[i])
		}
	}
	err := ve.Err()
	var fe FieldError
	if !errors.As(err, &fe) || fe != want[0] {
		t.Errorf("errors.As FieldError = %v, want %v", fe, want[0])
	}
	if got := (FieldError{"amount", RuleAmountPositive}).Error(); got != "amount: must be > 0" {
		t.Errorf("FieldError.Error = %q", got)
	}
	if got := ve[:2].Error(); got != "id: required; property_id: must match the property id pattern" {
		t.Errorf("ValidationError.Error = %q", got)
	}
	if ValidationError(nil).Err() != nil {
		t.Error("empty ValidationError.Err is not nil")
	}
}

func TestValidateTodayIsUTCWithoutZones(t *testing.T) {
	// 00:30 on 11 March in UTC+2 is still 10 March in UTC.
	east := time.FixedZone("EET", 2*3600)
	v, err := NewValidator(DefaultChannels(), "", func() time.Time { return time.Date(2026, 3, 11, 0, 30, 0, 0, east) })
	if err != nil {
		t.Fatal(err)
	}
	m := validMutation()
	m.StayDate = day("2026-03-10")
	if ve := v.Validate(m); ve != nil {
		t.Fatalf("Validate = %v, want today accepted", ve)
	}
}

func TestValidateTodayIsThePropertysDate(t *testing.T) {
	// 05:00 UTC on 11 March is 21:00 on 10 March in Los Angeles and 06:00 on
	// 11 March in Paris: tonight's stop-sell is still today in Los Angeles only.
	now := time.Date(2026, 3, 11, 5, 0, 0, 0, time.UTC)
	zones, err := ParsePropertyZones("Europe/Paris", "prop_0000aaaa=America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValidator(DefaultChannels(), "", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	v.Zones = zones
	west := validMutation()
	west.PropertyID = "prop_0000aaaa"
	west.StayDate = day("2026-03-10")
	if ve := v.Validate(west); ve != nil {
		t.Fatalf("Los Angeles property, night of 10 March at 21:00 local: Validate = %v, want accepted", ve)
	}
	paris := west
	paris.PropertyID = "prop_0000bbbb" // not listed: the default zone
	if ve := v.Validate(paris); !ve.Has("stay_date", RuleNotPast) {
		t.Fatalf("Paris property, 10 March when it is 11 March there: Validate = %v, want %s", ve, RuleNotPast)
	}
}

func TestParsePropertyZonesNamesVariableAndEntry(t *testing.T) {
	for _, tc := range []struct{ fallback, list, want string }{
		{"Mars/Olympus", "", `PARITYSYNC_TIME_ZONE: "Mars/Olympus" is not an IANA time zone`},
		{"", "prop_0000aaaa", `PARITYSYNC_PROPERTY_ZONES: entry "prop_0000aaaa": want property_id=Area/City`},
		{"", "prop_0000aaaa=Europe/Nowhere", `entry "prop_0000aaaa=Europe/Nowhere": "Europe/Nowhere" is not an IANA time zone`},
		{"", "prop_0000aaaa=UTC,prop_0000aaaa=Asia/Tokyo", "property prop_0000aaaa listed twice"},
	} {
		_, err := ParsePropertyZones(tc.fallback, tc.list)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePropertyZones(%q, %q) = %v, want an error containing %q", tc.fallback, tc.list, err, tc.want)
		}
	}
	z, err := ParsePropertyZones("", " prop_0000aaaa = Asia/Tokyo ,")
	if err != nil {
		t.Fatal(err)
	}
	if z.Of("prop_0000aaaa").String() != "Asia/Tokyo" || z.Of("other") != time.UTC {
		t.Fatalf("zones = %v / %v, want Asia/Tokyo / UTC", z.Of("prop_0000aaaa"), z.Of("other"))
	}
}

func TestApplyDefaults(t *testing.T) {
	ids := 0
	newID := func() string { ids++; return "generated" }
	cases := []struct {
		name string
		m    Mutation
		want int
	}{
		{"stop sell is urgent", Mutation{Values: Values{StopSell: ptr(true)}}, PriorityUrgent},
		{"sold out is urgent", Mutation{Values: Values{Inventory: ptr(0)}}, PriorityUrgent},
		{"stop sell in a full sync stays urgent", Mutation{Values: Values{StopSell: ptr(true)}, FullSync: true}, PriorityUrgent},
		{"full sync is bulk", Mutation{Values: Values{Amount: dec("10")}, FullSync: true}, PriorityBulk},
		{"reopening is default", Mutation{Values: Values{StopSell: ptr(false)}}, PriorityDefault},
		{"rate change is default", Mutation{Values: Values{Amount: dec("10")}}, PriorityDefault},
		{"explicit priority kept", Mutation{Values: Values{StopSell: ptr(true)}, Priority: 4}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			m.ApplyDefaults(newID)
			if m.Priority != tc.want {
				t.Errorf("Priority = %d, want %d", m.Priority, tc.want)
			}
			if m.CorrelationID != "generated" {
				t.Errorf("CorrelationID = %q", m.CorrelationID)
			}
		})
	}
	m := Mutation{CorrelationID: "from-pms"}
	m.ApplyDefaults(newID)
	if m.CorrelationID != "from-pms" {
		t.Errorf("CorrelationID overwritten: %q", m.CorrelationID)
	}
}

func TestCurrencyList(t *testing.T) {
	for _, c := range []string{"EUR", "USD", "GBP", "JPY", "CHF", "XCG", "ZWG", "SLE", "VES"} {
		if !IsCurrencyCode(c) {
			t.Errorf("%s rejected", c)
		}
	}
	for _, c := range []string{"", "EU", "EURO", "XXX", "XTS", "ANG", "ZWL", "DEM"} {
		if IsCurrencyCode(c) {
			t.Errorf("%q accepted", c)
		}
	}
}

// FuzzValidate feeds arbitrary JSON through decoding, validation, defaults and
// coalescing; none may panic, and an accepted mutation must coalesce into one line.
func FuzzValidate(f *testing.F) {
	seed, _ := json.Marshal(validMutation())
	f.Add(seed)
	f.Add([]byte(`{"amount":"1e9999","currency":"EUR","stay_date":"9999-12-31","version":1}`))
	f.Add([]byte(`{"amount":-0.000,"min_los":-5,"max_los":2147483647,"priority":-9223372036854775808}`))
	f.Add([]byte(`{"stay_date":"0000-01-01","inventory":0,"property_id":"prop_00000000"}`))
	f.Add([]byte(`{}`))
	v := newTestValidator(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Mutation
		if json.Unmarshal(data, &m) != nil {
			return
		}
		ve := v.Validate(m)
		_ = ve.Error()
		m.ApplyDefaults(func() string { return "c" })
		if m.Priority < 0 || m.Priority > PriorityBulk {
			if ve.Has("priority", RulePriority) {
				return
			}
			t.Fatalf("priority %d accepted", m.Priority)
		}
		out := Coalesce([]Mutation{m}, v.Channels)
		if ve == nil {
			if n := len(out.Requests); n != len(m.Families()) {
				t.Fatalf("valid mutation gave %d requests for %d families", n, len(m.Families()))
			}
			for _, r := range out.Requests {
				_ = r.IdempotencyKey()
			}
		}
	})
}

func TestKeysOfWorkflowIDs(t *testing.T) {
	for id, want := range map[string]WorkflowKeys{
		BatchWorkflowID("20260310-ab12"):                            {Batch: "20260310-ab12"},
		ChannelSyncWorkflowID("20260310-ab12", "booking_com", 2, 7): {Batch: "20260310-ab12", Channel: "booking_com", Priority: 2},
		SmootherWorkflowID("expedia"):                               {Channel: "expedia"},
		"reconcile/2026-03-10":                                      {},
		"something-else":                                            {},
	} {
		if got := KeysOf(id); got != want {
			t.Errorf("KeysOf(%q) = %+v, want %+v", id, got, want)
		}
	}
}

// TestWorstCaseMutationsFitAnUpdate encodes the largest mutation validation lets
// through (every field at its bound, the id with intake's tenant prefix, the
// correlation id of characters JSON escapes to six bytes) MaxInlineMutations
// times: the group stays within MaxUpdateBytes, so a smoother update or inline
// batch of valid changes never meets Temporal's payload limit.
func TestWorstCaseMutationsFitAnUpdate(t *testing.T) {
	v := newTestValidator(t)
	v.PropertyPattern = regexp.MustCompile(`^.*$`)
	m := Mutation{
		ID:         strings.Repeat("t", 32) + ":" + strings.Repeat("a", MaxMutationIDLength),
		PropertyID: strings.Repeat("p", MaxPropertyIDLength), RoomTypeCode: strings.Repeat("R", 16),
		RatePlanCode: strings.Repeat("P", 24), Channel: "booking_com", StayDate: DateOf(testNow()),
		Values: Values{Amount: dec("99999999.999"), Currency: "KWD", Inventory: ptr(999), StopSell: ptr(true), MinLOS: ptr(365), MaxLOS: ptr(365), CTA: ptr(true), CTD: ptr(true)}, Version: MaxVersion,
		Priority: 5, FullSync: true, CorrelationID: strings.Repeat("<", MaxCorrelationIDLength),
	}
	if ve := v.Validate(m); len(ve) > 0 {
		t.Fatalf("the worst case must be valid: %v", ve)
	}
	ms := make([]Mutation, MaxInlineMutations)
	for i := range ms {
		ms[i] = m
	}
	b, err := json.Marshal(ms)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxUpdateBytes {
		t.Fatalf("%d worst-case mutations encode to %d bytes, more than MaxUpdateBytes %d", len(ms), len(b), MaxUpdateBytes)
	}
	t.Logf("%d worst-case mutations: %d bytes of %d", len(ms), len(b), MaxUpdateBytes)
}
