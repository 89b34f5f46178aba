package activities

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// Metrics are the counters the activities keep for the worker's /metrics endpoint.
// A nil *Metrics counts nothing.
type Metrics struct {
	pushes      *prometheus.CounterVec
	denied      *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	updates     *prometheus.CounterVec
	breakers    *prometheus.CounterVec
}

// NewMetrics registers the counters with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paritysync_channel_requests_total", Help: "Channel requests sent, by channel, family and outcome class.",
		}, []string{"channel", "family", "class"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paritysync_limiter_denied_total", Help: "Pushes the limiter told to wait (a held slot, pause, back-off or the quota), by channel and quota tier.",
		}, []string{"channel", "tier"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paritysync_dead_lettered_updates_total", Help: "Updates parked in the dead-letter queue, by channel and reason.",
		}, []string{"channel", "reason"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paritysync_committed_updates_total", Help: "Updates the ledger recorded as committed, by channel.",
		}, []string{"channel"}),
		breakers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paritysync_breaker_transitions_total", Help: "Circuit breaker openings and closings, by channel and new state.",
		}, []string{"channel", "state"}),
	}
	reg.MustRegister(m.pushes, m.denied, m.deadLetters, m.updates, m.breakers)
	return m
}

func (m *Metrics) push(channel, family string, class channels.Class) {
	if m != nil {
		m.pushes.WithLabelValues(channel, family, string(class)).Inc()
	}
}

func (m *Metrics) deny(channel, tier string) {
	if m != nil {
		m.denied.WithLabelValues(channel, tier).Inc()
	}
}

func (m *Metrics) park(channel, reason string, n int) {
	if m != nil {
		m.deadLetters.WithLabelValues(channel, reason).Add(float64(n))
	}
}

func (m *Metrics) breaker(channel, state string) {
	if m != nil {
		m.breakers.WithLabelValues(channel, state).Inc()
	}
}

func (m *Metrics) commit(channel string, n int) {
	if m != nil {
		m.updates.WithLabelValues(channel).Add(float64(n))
	}
}

// Zero creates every channel's series at 0, so dashboards show 0 rather than "no
// data" and rate()/increase() count the first event (a series born at 1 loses it).
func (m *Metrics) Zero(slugs []string) {
	if m == nil {
		return
	}
	classes := []channels.Class{channels.ClassCommitted, channels.ClassPartial, channels.ClassThrottled, channels.ClassTransient, channels.ClassAuthExpired, channels.ClassQuotaExhausted, channels.ClassRejected}
	reasons := []string{models.ReasonRejected, models.ReasonAuth, models.ReasonQuotaExhausted, models.ReasonRetryExhausted,
		models.ReasonLineFailed, models.ReasonChildFailed}
	tiers := []limiter.Tier{limiter.TierOK, limiter.TierWarn, limiter.TierPage, limiter.TierThrottle, limiter.TierStop}
	for _, ch := range slugs {
		m.updates.WithLabelValues(ch)
		for _, f := range models.Families {
			for _, c := range classes {
				m.pushes.WithLabelValues(ch, string(f), string(c))
			}
		}
		for _, r := range reasons {
			m.deadLetters.WithLabelValues(ch, r)
		}
		for _, t := range tiers {
			m.denied.WithLabelValues(ch, string(t))
		}
	}
}
