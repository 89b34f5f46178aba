package channels_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
)

func TestParseRateLimit(t *testing.T) {
	epoch := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	cases := []struct {
		name string
		h    map[string]string
		want channels.RateLimit
		ok   bool
	}{
		{"X- headers, delta reset", map[string]string{"X-RateLimit-Limit": "90", "X-RateLimit-Remaining": "12", "X-RateLimit-Reset": "30"},
			channels.RateLimit{Limit: 90, Remaining: 12, Reset: 30 * time.Second}, true},
		{"X- headers, epoch reset", map[string]string{"X-RateLimit-Limit": "90", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": epoch(45 * time.Second)},
			channels.RateLimit{Limit: 90, Remaining: 0, Reset: 45 * time.Second}, true},
		{"epoch milliseconds", map[string]string{"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": strconv.FormatInt(now.Add(1500*time.Millisecond).UnixMilli(), 10)},
			channels.RateLimit{Remaining: 3, Reset: 1500 * time.Millisecond}, true},
		{"limit without remaining", map[string]string{"X-RateLimit-Limit": "90", "X-RateLimit-Reset": "60"},
			channels.RateLimit{Limit: 90, Remaining: -1, Reset: time.Minute}, true},
		{"epoch in the past", map[string]string{"X-RateLimit-Limit": "90", "X-RateLimit-Remaining": "90", "X-RateLimit-Reset": epoch(-time.Minute)},
			channels.RateLimit{Limit: 90, Remaining: 90}, true},
		{"fractional reset", map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "0.5"},
			channels.RateLimit{Limit: 10, Remaining: 1, Reset: 500 * time.Millisecond}, true},
		{"IETF separate headers", map[string]string{"RateLimit-Limit": "60", "RateLimit-Remaining": "7", "RateLimit-Reset": "20"},
			channels.RateLimit{Limit: 60, Remaining: 7, Reset: 20 * time.Second}, true},
		{"IETF limit with policy", map[string]string{"RateLimit-Limit": "100, 100;w=60", "RateLimit-Remaining": "50", "RateLimit-Reset": "5"},
			channels.RateLimit{Limit: 100, Remaining: 50, Reset: 5 * time.Second}, true},
		{"combined header", map[string]string{"RateLimit": "limit=100, remaining=50, reset=30"},
			channels.RateLimit{Limit: 100, Remaining: 50, Reset: 30 * time.Second}, true},
		{"structured header and policy", map[string]string{"RateLimit": `"default";r=50;t=30`, "RateLimit-Policy": `"default";q=100;w=60`},
			channels.RateLimit{Limit: 100, Remaining: 50, Reset: 30 * time.Second}, true},
		{"X- wins, IETF fills gaps", map[string]string{"X-RateLimit-Limit": "90", "RateLimit-Limit": "10", "RateLimit-Remaining": "4"},
			channels.RateLimit{Limit: 90, Remaining: 4}, true},
		{"only remaining", map[string]string{"X-RateLimit-Remaining": "2"},
			channels.RateLimit{Remaining: 2}, true},
		{"absent", map[string]string{}, channels.RateLimit{}, false},
		{"only reset", map[string]string{"X-RateLimit-Reset": "30"}, channels.RateLimit{}, false},
		{"garbage", map[string]string{"X-RateLimit-Limit": "lots", "X-RateLimit-Remaining": "some"}, channels.RateLimit{}, false},
		{"negative", map[string]string{"X-RateLimit-Limit": "-1", "X-RateLimit-Remaining": "-5"}, channels.RateLimit{}, false},
		{"garbage reset ignored", map[string]string{"X-RateLimit-Limit": "9", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "NaN"},
			channels.RateLimit{Limit: 9, Remaining: 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range c.h {
				h.Set(k, v)
			}
			got, ok := channels.ParseRateLimit(h, now)
			if got != c.want || ok != c.ok {
				t.Errorf("ParseRateLimit = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
