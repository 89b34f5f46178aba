package models

import "testing"

func fixedRequest() ChannelRequest {
	return ChannelRequest{
		Channel: "booking_com", PropertyID: "prop_0a1b2c3d", Family: FamilyRates, Priority: 3,
		Lines: []ARILine{
			{RoomTypeCode: "DLX", RatePlanCode: "BAR", From: day("2027-01-01"), To: day("2027-01-07"),
				Amount: dec("129.90"), Currency: "EUR", Version: 4},
			{RoomTypeCode: "STD", RatePlanCode: "NRF", From: day("2027-01-01"), To: day("2027-01-01"),
				Amount: dec("89"), Currency: "EUR", Version: 4},
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
