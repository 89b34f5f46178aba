package models

import "testing"

func fixedRequest() ChannelRequest {
	return ChannelRequest{
		Channel: "booking_com", PropertyID: "prop_0a1b2c3d", Family: FamilyRates, Priority: 3,
		Lines: []ARILine{
			{RoomTypeCode: "DLX", RatePlanCode: "BAR", From: day("2027-01-01"), To: day("2027-01-07"),
				Values: Values{Amount: dec("129.90"), Currency: "EUR"}, Version: 4},
			{RoomTypeCode: "STD", RatePlanCode: "NRF", From: day("2027-01-01"), To: day("2027-01-01"),
				Values: Values{Amount: dec("89"), Currency: "EUR"}, Version: 4},
		},
		Refs: []MutationRef{{ID: "m1", Version: 4, Line: 0, StayDate: day("2027-01-01")}},
	}
}

// The key is a contract with channels that deduplicate on it: it must not change
// between releases, processes or Go versions for the same content.
func TestIdempotencyKeyIsStable(t *testing.T) {
	// sha256 of {"channel":"booking_com","body":{"property_id":"prop_0a1b2c3d",
	// "family":"rates","lines":[{...,"amount":"129.9",...},{...,"amount":"89",...}]}},
	// checked with sha256sum.
	const want = "ec1dbbb14636512806c7a720e5e2406b87f2ba862eff9ab78d3cc6d4daa33bf9"
	if got := fixedRequest().IdempotencyKey(); got != want {
		t.Fatalf("IdempotencyKey = %s, want %s", got, want)
	}
}

func TestIdempotencyKeyFollowsContent(t *testing.T) {
	base := fixedRequest().IdempotencyKey()
	changes := map[string]func(*ChannelRequest){
		"channel":     func(r *ChannelRequest) { r.Channel = "expedia" },
		"property":    func(r *ChannelRequest) { r.PropertyID = "prop_0a1b2c3e" },
		"family":      func(r *ChannelRequest) { r.Family = FamilyAvailability },
		"amount":      func(r *ChannelRequest) { r.Lines[0].Amount = dec("129.91") },
		"date range":  func(r *ChannelRequest) { r.Lines[0].To = day("2027-01-08") },
		"version":     func(r *ChannelRequest) { r.Lines[1].Version = 5 },
		"line order":  func(r *ChannelRequest) { r.Lines[0], r.Lines[1] = r.Lines[1], r.Lines[0] },
		"resend salt": func(r *ChannelRequest) { r.KeySalt = "run-2" },
	}
	for name, change := range changes {
		r := fixedRequest()
		change(&r)
		if r.IdempotencyKey() == base {
			t.Errorf("changing the %s kept the key", name)
		}
	}
	// Bookkeeping that does not reach the channel does not change the key, and an
	// amount's trailing zeros are not content.
	same := map[string]func(*ChannelRequest){
		"refs":           func(r *ChannelRequest) { r.Refs = nil },
		"priority":       func(r *ChannelRequest) { r.Priority = 1 },
		"trailing zeros": func(r *ChannelRequest) { r.Lines[1].Amount = dec("89.00") },
	}
	for name, change := range same {
		r := fixedRequest()
		change(&r)
		if r.IdempotencyKey() != base {
			t.Errorf("changing the %s changed the key", name)
		}
	}
}

func TestWithoutNightsSplitsLinesAndReturnsDroppedRefs(t *testing.T) {
	d := func(s string) Date { x, _ := ParseDate(s); return x }
	r := ChannelRequest{
		Lines: []ARILine{
			{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: d("2030-05-01"), To: d("2030-05-04"), Version: 3},
			{RoomTypeCode: "SGL", RatePlanCode: "BAR", From: d("2030-05-01"), To: d("2030-05-01"), Version: 3},
		},
		Refs: []MutationRef{
			{ID: "a", Line: 0, StayDate: d("2030-05-01")}, {ID: "b", Line: 0, StayDate: d("2030-05-02")},
			{ID: "c", Line: 0, StayDate: d("2030-05-03")}, {ID: "e", Line: 0, StayDate: d("2030-05-04")},
			{ID: "f", Line: 1, StayDate: d("2030-05-01")},
		},
	}
	got, dropped := r.WithoutNights([]LineNight{{0, d("2030-05-02")}, {1, d("2030-05-01")}})
	if len(got.Lines) != 2 || got.Lines[0].To != d("2030-05-01") || got.Lines[1].From != d("2030-05-03") || got.Lines[1].To != d("2030-05-04") {
		t.Fatalf("lines %+v, want 05-01 and 05-03..05-04", got.Lines)
	}
	if len(dropped) != 2 || dropped[0].ID != "b" || dropped[1].ID != "f" {
		t.Fatalf("dropped %+v, want b and f", dropped)
	}
	want := map[string]int{"a": 0, "c": 1, "e": 1}
	for _, ref := range got.Refs {
		if want[ref.ID] != ref.Line {
			t.Errorf("ref %s on line %d, want %d", ref.ID, ref.Line, want[ref.ID])
		}
	}
	if same, none := r.WithoutNights(nil); len(none) != 0 || len(same.Lines) != 2 {
		t.Fatalf("nothing dropped changed the request")
	}
}
