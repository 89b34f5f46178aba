package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// fakeLag is a store whose parity lag is set by the test; nil fails the read.
type fakeLag []store.ParityLag

func (f fakeLag) ParityLag(context.Context, time.Duration, string) ([]store.ParityLag, error) {
	if f == nil {
		return nil, errors.New("postgres: connection refused")
	}
	return f, nil
}

func TestLagGaugesReportEveryChannelFromTheStore(t *testing.T) {
	chs := []models.ChannelConfig{models.NewChannelConfig("expedia", 60), models.NewChannelConfig("agoda", 60)}
	g := newLagGauges(fakeLag{{Channel: "expedia", Oldest: 90 * time.Second, Pending: 12, Acked: 40,
		P50: 1500 * time.Millisecond, P99: 20 * time.Second}}, chs)
	require.NoError(t, testutil.CollectAndCompare(g, strings.NewReader(`
# HELP paritysync_parity_lag_oldest_seconds Age of the oldest desired change not acknowledged yet: since its batch was accepted, while the batch still owes the channel updates.
# TYPE paritysync_parity_lag_oldest_seconds gauge
paritysync_parity_lag_oldest_seconds{channel="agoda"} 0
paritysync_parity_lag_oldest_seconds{channel="expedia"} 90
# HELP paritysync_parity_lag_seconds Time from a batch's acceptance to the channel's acknowledgement of its updates, over the last hour (at most 19 % high).
# TYPE paritysync_parity_lag_seconds gauge
paritysync_parity_lag_seconds{channel="agoda",quantile="0.5"} 0
paritysync_parity_lag_seconds{channel="agoda",quantile="0.99"} 0
paritysync_parity_lag_seconds{channel="expedia",quantile="0.5"} 1.5
paritysync_parity_lag_seconds{channel="expedia",quantile="0.99"} 20
# HELP paritysync_parity_lag_pending_updates Updates of open batches still without an outcome on the channel.
# TYPE paritysync_parity_lag_pending_updates gauge
paritysync_parity_lag_pending_updates{channel="agoda"} 0
paritysync_parity_lag_pending_updates{channel="expedia"} 12
# HELP paritysync_parity_lag_up 1 when the parity lag could be read from PostgreSQL at this scrape.
# TYPE paritysync_parity_lag_up gauge
paritysync_parity_lag_up 1
`), "paritysync_parity_lag_oldest_seconds", "paritysync_parity_lag_seconds", "paritysync_parity_lag_pending_updates",
		"paritysync_parity_lag_up"))
	// An unreadable store: no lag series, and lag_up says so.
	down := newLagGauges(fakeLag(nil), chs)
	require.Equal(t, 1, testutil.CollectAndCount(down))
}
