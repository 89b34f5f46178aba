package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
)

// season is 245 nights, from the first of a month at least 60 days ahead
// (2027-03-01..2027-10-31 when run in December 2026), and its weekend nights.
func season() (from, to models.Date, weekend []models.Date) {
	ahead := time.Now().UTC().AddDate(0, 2, 0)
	from = models.DateOf(time.Date(ahead.Year(), ahead.Month()+1, 1, 0, 0, 0, 0, time.UTC))
	to = from.AddDays(244)
	for d := from; !d.After(to); d = d.AddDays(1) {
		if wd := d.Time().Weekday(); wd == time.Saturday || wd == time.Sunday {
			weekend = append(weekend, d)
		}
	}
	return from, to, weekend
}

// TestRangeMutationOneOutcomePerChannelOverHTTP posts one mutation for 245 nights,
// weekends only, to the two channels its property is mapped to (channel "*"): each
// channel gets one committed outcome and counts one update, not one per night, and
// the simulator receives the weekends as ranged lines, far fewer than 245. A range
// reaching into the past is clipped and its outcome says so; a range with from after
// to is refused naming the field and rule. Every call is checked against
// openapi.yaml.
func TestRangeMutationOneOutcomePerChannelOverHTTP(t *testing.T) {
	t.Parallel()
	c, s, h := startAPI(t)
	started := time.Now()

	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels",
		`{"channels":["booking_com","expedia"]}`), true).StatusCode)

	from, to, weekend := season()
	weekends := len(weekend)
	today := models.DateOf(time.Now().UTC())
	rangeRow := func(id, ch string, from, to models.Date, extra string) string {
		return fmt.Sprintf(`{"id":%q,"property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR_FLEX",`+
			`"channel":%q,"from":%q,"to":%q,%s"amount":"129.00","currency":"EUR","version":5}`, id, ch, from, to, extra)
	}
	body := strings.Join([]string{
		rangeRow("season", "*", from, to, `"days":["sat","sun"],`),
		rangeRow("clip", "agoda", today.AddDays(-3), today.AddDays(3), ""),
		rangeRow("backwards", "agoda", to, from, ""),
		rangeRow("stay-too", "agoda", from, to, `"stay_date":"`+from.String()+`",`),
		rangeRow("bad-day", "agoda", from, to, `"days":["sat","caturday"],`),
	}, "\n") + "\n"
	req := request(http.MethodPost, "/v1/batches", body)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp := c.do(t, h, req, false) // stay-too and bad-day are off the schema on purpose
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	acc := decodeJSON[batchAccepted](t, resp)
	require.Equal(t, 3, acc.Accepted, "season on two channels, clip: %+v", acc.Rejected)
	problems := map[string]string{}
	for _, p := range acc.Rejected {
		problems[p.ID] = p.Field + ": " + p.Rule
	}
	require.Equal(t, map[string]string{
		"backwards": "from: " + models.RuleFromLETo,
		"stay-too":  "stay_date: " + models.RuleNotWithRange,
		"bad-day":   "days: " + models.RuleDays,
	}, problems)

	view := awaitBatchDone(t, c, h, acc.StatusURL, 3*time.Minute)
	counts := map[string]models.ChannelCounts{}
	for _, ch := range view.Counts {
		counts[ch.Channel] = ch
	}
	for _, ch := range []string{"booking_com", "expedia"} {
		require.Equal(t, 1, counts[ch].Total, "%s: one range is one update: %+v", ch, counts[ch])
		require.Equal(t, 1, counts[ch].Committed, "%s: %+v", ch, counts[ch])
	}
	require.Equal(t, 1, counts["agoda"].Committed, "the clipped range: %+v", counts["agoda"])
	rej := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, acc.StatusURL+"/rejections", ""), true))
	require.Len(t, rej.Outcomes, 3, "each refused row has its rejected outcome")
	for _, p := range view.Progress {
		require.Equal(t, p.Total, p.Done, "every update of a done batch has its outcome: %+v", p)
	}

	for _, id := range []string{"season@booking_com", "season@expedia"} {
		out := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, acc.StatusURL+"/outcomes?mutation="+id, ""), true))
		require.Len(t, out.Outcomes, 1, "%s: one outcome for the range's rates", id)
		require.Equal(t, models.OutcomeCommitted, out.Outcomes[0].Outcome, id)
		require.Equal(t, models.FamilyRates, out.Outcomes[0].Family, id)
	}
	out := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, acc.StatusURL+"/outcomes?mutation=clip", ""), true))
	require.Len(t, out.Outcomes, 1)
	require.Equal(t, models.OutcomeCommitted, out.Outcomes[0].Outcome)
	require.Equal(t, fmt.Sprintf("3 nights before today clipped (%s..%s)", today.AddDays(-3), today.AddDays(-1)), out.Outcomes[0].Reason)

	// The channels received the weekends as ranged lines: one per weekend (a
	// Saturday and its Sunday), every weekend night once.
	for _, ch := range []string{"booking_com", "expedia"} {
		lines, nights := 0, 0
		reqs := s.Sim.Requests(ch, started)
		for _, r := range reqs {
			require.Equal(t, http.StatusOK, r.Status, ch)
			lines += r.Lines
			nights += r.Nights
		}
		require.Equal(t, weekends, nights, "%s: every weekend night of the range", ch)
		require.LessOrEqual(t, lines, weekends/2+1, "%s: a line per weekend", ch)
		require.Less(t, lines, 245/5, "%s: far fewer lines than nights", ch)
		t.Logf("%s: %d weekend nights of %s..%s arrived as %d lines in %d requests", ch, nights, from, to, lines, len(reqs))
	}
}
