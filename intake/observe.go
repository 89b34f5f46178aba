package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics are the API's Prometheus series.
type serverMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	changes  *prometheus.CounterVec
	// groupSize and groupPosts describe each update a channel's submitter sends:
	// its changes and the posts they came from.
	groupSize  *prometheus.HistogramVec
	groupPosts *prometheus.HistogramVec
}

func newServerMetrics(reg *prometheus.Registry) *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paritysync_intake_requests_total", Help: "HTTP requests by route and status.",
		}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "paritysync_intake_request_seconds", Help: "HTTP request duration by route.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paritysync_intake_changes_total", Help: "Webhook changes by channel and answer (accepted, rejected, refused).",
		}, []string{"channel", "answer"}),
	}
	m.groupSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "paritysync_intake_submit_group_size", Help: "Changes per update sent to a channel's smoother.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500},
	}, []string{"channel"})
	m.groupPosts = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "paritysync_intake_submit_group_posts", Help: "Webhook posts per update sent to a channel's smoother.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100},
	}, []string{"channel"})
	reg.MustRegister(m.requests, m.duration, m.changes, m.groupSize, m.groupPosts)
	return m
}

type logKey struct{}

// requestLog is what a request's log line carries besides method, path and status.
type requestLog struct {
	tenant, batch string
}

func setLogBatch(r *http.Request, id string) {
	if l, ok := r.Context().Value(logKey{}).(*requestLog); ok {
		l.batch = id
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (readBody's deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// observe logs one line per request (tenant, method, path, status, duration, batch)
// and counts it by route pattern, never by raw path.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		l := &requestLog{}
		sw := &statusWriter{ResponseWriter: w}
		ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), logKey{}, l), s.cfg.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		d := time.Since(start)
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		s.metrics.requests.WithLabelValues(route, http.StatusText(sw.status)).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(d.Seconds())
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", d.Round(time.Microsecond)}
		if l.tenant != "" {
			attrs = append(attrs, "tenant", l.tenant)
		}
		if l.batch != "" {
			attrs = append(attrs, "batch", l.batch)
		}
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelError
		}
		s.log.Log(r.Context(), level, "request", attrs...)
	})
}
