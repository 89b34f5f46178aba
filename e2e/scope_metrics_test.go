package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// scrapeSample is the value of one sample (name with its labels, as the text
// exposition writes them) in a /metrics response; false when absent.
func scrapeSample(t *testing.T, url, sample string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err, "sample %s", sample)
			return v, true
		}
	}
	require.NoError(t, sc.Err())
	return 0, false
}

// TestScrapeShowsPropertyBackoffsAndFamilyStops: a worker pushes to a channel that
// limits per property. A 429 storm backs off the one property pushed to, and the
// worker's /metrics shows it (paritysync_backoff_properties 1) while the channel's
// own back-off stays 0; after the storm the push commits and the gauge goes back to
// 0. The channel's daily quota then runs out at the channel (its own count is lower
// than ours): the next push, of availability, is answered quota_exhausted, and the
// scrape shows availability stopped and rates not.
func TestScrapeShowsPropertyBackoffsAndFamilyStops(t *testing.T) {
	srv := parallelDevServer(t)
	// Counted from the batch's first push: a storm counted from SetFaults (4 s) had
	// ended on a loaded machine before the batch pushed.
	const storm = 12 * time.Second
	s := startStackWith(t, srv, stack.Options{
		Channels: map[string]stack.Channel{"expedia": {PerMinute: 60, Burst: 6, MaxLines: 4}},
		Env:      map[string]string{"PARITYSYNC_CHANNEL_EXPEDIA_SCOPE": "property"},
		Sim: func(c *sim.Config) {
			for i := range c.Channels {
				if c.Channels[i].Slug == "expedia" {
					c.Channels[i].DailyQuota = 1 // the channel counts one push a day
				}
			}
		},
	})
	scrape := httptest.NewServer(promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{}))
	t.Cleanup(scrape.Close)
	url := scrape.URL + "/metrics"
	gauge := func(sample string) float64 {
		v, ok := scrapeSample(t, url, sample)
		require.True(t, ok, "%s is in the scrape", sample)
		return v
	}
	const (
		backedOff   = `paritysync_backoff_properties{channel="expedia"}`
		chanBackoff = `paritysync_channel_backoff_seconds{channel="expedia"}`
		stoppedAv   = `paritysync_family_stopped{channel="expedia",family="availability"}`
		stoppedRa   = `paritysync_family_stopped{channel="expedia",family="rates"}`
	)
	require.Zero(t, gauge(backedOff))
	require.Zero(t, gauge(stoppedAv))

	require.NoError(t, s.Sim.SetFaults(sim.Faults{StormSeconds: int(storm / time.Second), Channels: []string{"expedia"},
		StormFromFirstPush: true}))
	id := fmt.Sprint(time.Now().UnixNano())
	night := models.DateOf(time.Now()).AddDays(10)
	run := s.startBatch(t, models.BatchSyncInput{BatchID: "scope-429-" + id,
		Mutations: rateCells("expedia", 1, night, 1, "120.00"), Retry: models.DefaultRetryPolicy()})
	require.Eventually(t, func() bool { return gauge(backedOff) == 1 }, time.Minute, 50*time.Millisecond,
		"the 429's back-off of the property shows in the scrape")
	require.Zero(t, gauge(chanBackoff), "the channel itself is not backed off")
	st := waitBatch(t, run, 2*time.Minute)
	require.Equal(t, 1, st.Totals().Committed, "the push commits after the storm")
	require.Positive(t, s.Sim.Stats()["expedia"].Throttled)
	require.Eventually(t, func() bool { return gauge(backedOff) == 0 }, 10*time.Second, 100*time.Millisecond,
		"the ended back-off leaves the gauge")

	inv := 4
	avail := models.Mutation{ID: "scope-avail-" + id, PropertyID: "prop_00000001", RoomTypeCode: "DLXKING",
		RatePlanCode: "BAR_FLEX", Channel: "expedia", StayDate: night, Values: models.Values{Inventory: &inv}, Version: 2}
	run = s.startBatch(t, models.BatchSyncInput{BatchID: "scope-quota-" + id, Mutations: []models.Mutation{avail},
		Retry: models.DefaultRetryPolicy()})
	t.Cleanup(func() {
		_ = s.TC.TerminateWorkflow(context.Background(), run.GetID(), "", "end of test: it waits for the quota's reset")
	})
	require.Eventually(t, func() bool { return gauge(stoppedAv) == 1 }, time.Minute, 100*time.Millisecond,
		"the channel's quota_exhausted stops availability, and the scrape shows it")
	require.Zero(t, gauge(stoppedRa), "rates are not stopped")
	require.Equal(t, 1, s.Sim.Stats()["expedia"].QuotaExhausted)
}
