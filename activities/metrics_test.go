package activities

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paritysync/paritysync/channels"
)

func TestMetricsCountWhatHappened(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.push("expedia", "rates", channels.ClassCommitted)
	m.push("expedia", "rates", channels.ClassCommitted)
	m.push("expedia", "rates", channels.ClassThrottled)
	m.deny("expedia", "ok")
	m.park("agoda", "rejected", 4)
	m.commit("expedia", 7)

	for name, tc := range map[string]struct {
		got, want float64
	}{
		"committed pushes": {testutil.ToFloat64(m.pushes.WithLabelValues("expedia", "rates", "committed")), 2},
		"throttled pushes": {testutil.ToFloat64(m.pushes.WithLabelValues("expedia", "rates", "throttled")), 1},
		"denials":          {testutil.ToFloat64(m.denied.WithLabelValues("expedia", "ok")), 1},
		"parked updates":   {testutil.ToFloat64(m.deadLetters.WithLabelValues("agoda", "rejected")), 4},
		"committed":        {testutil.ToFloat64(m.updates.WithLabelValues("expedia")), 7},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", name, tc.got, tc.want)
		}
	}

	var none *Metrics
	none.push("expedia", "rates", channels.ClassCommitted) // a nil *Metrics counts nothing and does not panic
}
