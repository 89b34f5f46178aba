package app

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx/fxtest"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/worker/app/metricstest"
)

// fakeStatus is a limiter whose state is set by the test.
type fakeStatus map[string]limiter.Status

func (f fakeStatus) Status(_ context.Context, channel string) (limiter.Status, error) {
	st, ok := f[channel]
	if !ok {
		return limiter.Status{}, errors.New("redis: connection refused")
	}
	return st, nil
}

func TestDashboardAndAlertMetricsExistInAScrape(t *testing.T) {
	lc := fxtest.NewLifecycle(t)
	s := config.DefaultSettings()
	s.MetricsAddr = "127.0.0.1:0"
	m, err := newMetrics(lc, s)
	require.NoError(t, err)
	chs := models.DefaultChannels()
	m.Metrics.Zero(slugs(chs))
	status := fakeStatus{}
	for _, c := range chs {
		status[c.Slug] = limiter.Status{Channel: c.Slug, DailyLimit: c.DailyQuota, Tier: limiter.TierOK,
			Limit: c.RatePerMinute, InWindow: 3, Ahead: 1}
	}
	m.Registry.MustRegister(newLimiterGauges(status, chs))
	m.Registry.MustRegister(newLagGauges(fakeLag{}, chs))
	// What the SDK records under these names (go.temporal.io/sdk/internal/common/metrics);
	// the end-to-end test repeats this check with a real worker after a batch.
	sdk := m.SDKMetrics.WithTags(map[string]string{"activity_type": "PushRequest", "task_queue": "paritysync"})
	sdk.Timer("temporal_activity_schedule_to_start_latency").Record(1500 * time.Millisecond)
	sdk.Timer("temporal_workflow_task_schedule_to_start_latency").Record(20 * time.Millisecond)
	sdk.Timer("temporal_activity_execution_latency").Record(80 * time.Millisecond)

	srv := httptest.NewServer(m.Server.Handler)
	defer srv.Close()
	metricstest.RequireQueriedIn(t, metricstest.ScrapedNames(t, srv.URL+"/metrics"))
}

func TestLimiterGaugesReadTheSharedState(t *testing.T) {
	chs := []models.ChannelConfig{models.NewChannelConfig("expedia", 60), models.NewChannelConfig("agoda", 60)}
	g := newLimiterGauges(fakeStatus{"expedia": {Channel: "expedia", DailyUsed: 90, DailyLimit: 100, Tier: limiter.TierPage,
		PausedReason: "maintenance", PausedFor: 3 * time.Second, InWindow: 42, Ahead: 7}}, chs)
	// agoda's state cannot be read: its gauges are absent and limiter_up says so.
	require.NoError(t, testutil.CollectAndCompare(g, strings.NewReader(`
# HELP paritysync_quota_tier Daily quota tier: 0 ok, 1 warn (≥70 %), 2 page (≥85 %), 3 throttle (≥95 %), 4 stop (100 %).
# TYPE paritysync_quota_tier gauge
paritysync_quota_tier{channel="expedia"} 2
# HELP paritysync_quota_daily_used Daily quota used today, by channel (in the channel's quota unit).
# TYPE paritysync_quota_daily_used gauge
paritysync_quota_daily_used{channel="expedia"} 90
# HELP paritysync_channel_backoff_seconds What is left of the channel-wide back-off written after a 429 or 503.
# TYPE paritysync_channel_backoff_seconds gauge
paritysync_channel_backoff_seconds{channel="expedia"} 3
# HELP paritysync_channel_paused 1 while an operator pause holds the channel.
# TYPE paritysync_channel_paused gauge
paritysync_channel_paused{channel="expedia"} 1
# HELP paritysync_window_slots Slots the channel-wide 60 s window holds now (sent, or held and due).
# TYPE paritysync_window_slots gauge
paritysync_window_slots{channel="expedia"} 42
# HELP paritysync_slots_reserved_ahead Future slots held for waiting requests on the channel-wide schedule.
# TYPE paritysync_slots_reserved_ahead gauge
paritysync_slots_reserved_ahead{channel="expedia"} 7
# HELP paritysync_limiter_up 1 when the limiter state could be read from Redis at this scrape.
# TYPE paritysync_limiter_up gauge
paritysync_limiter_up 0
`), "paritysync_quota_tier", "paritysync_quota_daily_used", "paritysync_channel_backoff_seconds",
		"paritysync_channel_paused", "paritysync_window_slots", "paritysync_slots_reserved_ahead", "paritysync_limiter_up"))
	require.Equal(t, 1, testutil.CollectAndCount(g, "paritysync_quota_daily_limit"))
}
