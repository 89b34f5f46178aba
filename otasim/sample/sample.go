// Package sample makes realistic PMS batches: what `starter sample` writes for the
// demo, and the input of the tests and benchmarks that need one.
package sample

import (
	"fmt"
	"math/rand/v2"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/models"
)

// Batch is a realistic PMS batch of n mutations starting the day after today,
// all at version (stop-sells at version+1): rates for
// several properties, room types and rate plans on 3 channels with prices that hold
// for a few nights at a time (so they coalesce), availability, a few urgent
// stop-sells, and about 1 % invalid rows that must come back rejected.
func Batch(n int, today models.Date, version int64, seed uint64) []models.Mutation {
	return BatchFor(n, today, version, seed, Channels)
}

// Channels are the channels Batch spreads its mutations over.
var Channels = []string{"booking_com", "expedia", "agoda"}

// Properties, Rooms and Plans are the codes a sample batch uses,
// so a channel configuration (a Channex mapping) can cover them.
var (
	Properties = []string{"prop_1a2b3c4d", "prop_5e6f7a8b", "prop_9c0d1e2f"}
	Rooms      = []string{"DLXKING", "STDQUEEN", "SUITE"}
	Plans      = []string{"BAR_FLEX", "BAR_NR"}
)

// BatchFor is Batch spread over the given channels.
func BatchFor(n int, today models.Date, version int64, seed uint64, channels []string) []models.Mutation {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	properties, rooms, plans := Properties, Rooms, Plans
	base := map[string]int64{"DLXKING": 18900, "STDQUEEN": 12900, "SUITE": 32900}
	invalid := max(1, n/100)
	stops := max(1, n/50)
	ms := make([]models.Mutation, 0, n)
	id := func() string { return fmt.Sprintf("m%06d", len(ms)+1) }

	// Rates: walk the cells night by night so runs of equal prices sit together.
	for night := 1; len(ms) < n-invalid-stops; night++ {
		for _, p := range properties {
			for _, r := range rooms {
				for _, plan := range plans {
					for _, ch := range channels {
						if len(ms) >= n-invalid-stops {
							break
						}
						week := int64(night / 7)
						cents := base[r] + week*500
						if plan == "BAR_NR" {
							cents = cents * 9 / 10
						}
						amount := decimal.New(cents, -2)
						ms = append(ms, models.Mutation{ID: id(), PropertyID: p, RoomTypeCode: r, RatePlanCode: plan,
							Channel: ch, StayDate: today.AddDays(night), Values: models.Values{Amount: &amount, Currency: "EUR"}, Version: version})
					}
				}
			}
		}
	}
	for range stops {
		stop, zero := true, 0
		m := models.Mutation{ID: id(), PropertyID: properties[rnd.IntN(len(properties))], RoomTypeCode: rooms[rnd.IntN(len(rooms))],
			RatePlanCode: plans[0], Channel: channels[rnd.IntN(len(channels))], StayDate: today.AddDays(1 + rnd.IntN(3)),
			Version: version + 1}
		if rnd.IntN(2) == 0 {
			m.StopSell = &stop
		} else {
			m.Inventory = &zero
		}
		ms = append(ms, m)
	}
	bad := []func(m *models.Mutation){
		func(m *models.Mutation) { m.Currency = "EURO" },
		func(m *models.Mutation) { m.PropertyID = "hotel-1" },
		func(m *models.Mutation) { neg := decimal.New(-100, 0); m.Amount = &neg },
		func(m *models.Mutation) { m.StayDate = today.AddDays(-3) },
	}
	for i := range invalid {
		amount := decimal.New(15000, -2)
		m := models.Mutation{ID: id(), PropertyID: properties[0], RoomTypeCode: rooms[0], RatePlanCode: plans[0],
			Channel: channels[i%len(channels)], StayDate: today.AddDays(30), Values: models.Values{Amount: &amount, Currency: "EUR"}, Version: version}
		bad[i%len(bad)](&m)
		ms = append(ms, m)
	}
	return ms
}
