package main

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// TestWeekendRangeGoesAsOneLineWithDays posts one range of 245 nights, weekends
// only, at one price to every channel of a property on a Channex and an OpenTravel
// channel: each commits it as one outcome, and each receives it as one line with
// the days (OpenTravel: one write over the season with Sat and Sun, where a channel
// without days gets a line per weekend); the simulators set exactly the weekend
// nights, no night between them.
func TestWeekendRangeGoesAsOneLineWithDays(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	cx := cxKnown("BAR_FLEX")
	ota := models.NewChannelConfig("ota_days", 600)
	ota.Protocol, ota.ReadBack = models.ProtocolOpenTravel, false
	s := startStackWith(t,
		[]models.ChannelConfig{models.NewChannexChannel("channex_days", cx), ota},
		[]models.ChannelConfig{models.NewChannexChannel("channex_days", cx), ota})
	h := s.api
	started := time.Now()
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels",
		`{"channels":["channex_days","ota_days"]}`), true).StatusCode)

	from, to, weekend := season()
	row := fmt.Sprintf(`{"id":"season","property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR_FLEX",`+
		`"from":%q,"to":%q,"days":["sat","sun"],"amount":"129.00","currency":"EUR","version":5}`, from, to)
	acc := decodeJSON[batchAccepted](t, c.do(t, h, request(http.MethodPost, "/v1/batches", "["+row+"]"), true))
	require.Equal(t, 2, acc.Accepted, "%+v", acc.Rejected)
	for _, id := range []string{"season@channex_days", "season@ota_days"} {
		awaitCommitted(t, c, h, acc.StatusURL+"/outcomes?mutation="+id, 2*time.Minute, "%s committed", id)
	}

	weekendDays := models.Weekdays(1<<time.Saturday | 1<<time.Sunday)
	applied := slices.DeleteFunc(s.Sim.Applied("ota_days"), func(a sim.ApplyRecord) bool { return a.At.Before(started) })
	require.Len(t, applied, 1, "one OpenTravel line for the season: %+v", applied)
	require.Equal(t, weekendDays, applied[0].Days)
	require.Equal(t, weekend[0], applied[0].From)
	require.Equal(t, weekend[len(weekend)-1], applied[0].To)

	// Channex takes the line as one change object with days; the simulator writes
	// it night by night: every weekend night, and none between.
	nights := map[models.Date]bool{}
	for _, a := range s.Sim.Applied("channex_days") {
		if a.At.Before(started) {
			continue
		}
		for d := a.From; !d.After(a.To); d = d.AddDays(1) {
			nights[d] = true
		}
	}
	require.Len(t, nights, len(weekend), "exactly the weekend nights")
	for _, d := range weekend {
		require.True(t, nights[d], "%s set", d)
	}
	reqs := s.Sim.Requests("channex_days", started)
	require.Len(t, reqs, 1, "one Channex request for the season")
}
