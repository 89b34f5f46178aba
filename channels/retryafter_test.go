package channels_test

import (
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
)

// now is a Sunday, so every date form below can carry the right weekday.
var now = time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	const fiveMin = 5 * time.Minute
	cases := []struct {
		name string
		in   string
		max  time.Duration
		want time.Duration
		ok   bool
	}{
		{"delta seconds", "120", fiveMin, 120 * time.Second, true},
		{"zero", "0", fiveMin, 0, true},
		{"surrounding space", "  5 ", fiveMin, 5 * time.Second, true},
		{"leading zeros", "007", fiveMin, 7 * time.Second, true},
		{"capped delta", "600", fiveMin, fiveMin, true},
		{"no cap", "600", 0, 600 * time.Second, true},
		{"largest delta capped", "9223372036", fiveMin, fiveMin, true},
		{"largest delta uncapped", "9223372036", 0, 9223372036 * time.Second, true},
		{"delta overflows duration", "9223372037", fiveMin, 0, false},
		{"delta overflows uint64", "99999999999999999999999", fiveMin, 0, false},
		{"negative", "-5", fiveMin, 0, false},
		{"plus sign", "+5", fiveMin, 0, false},
		{"fraction", "1.5", fiveMin, 0, false},
		{"garbage", "soon", fiveMin, 0, false},
		{"empty", "", fiveMin, 0, false},
		{"blank", "   ", fiveMin, 0, false},
		{"IMF-fixdate", "Sun, 10 Mar 2030 12:01:30 GMT", fiveMin, 90 * time.Second, true},
		{"IMF-fixdate capped", "Sun, 10 Mar 2030 13:00:00 GMT", fiveMin, fiveMin, true},
		{"RFC 850", "Sunday, 10-Mar-30 12:01:30 GMT", fiveMin, 90 * time.Second, true},
		{"asctime", "Sun Mar 10 12:01:30 2030", fiveMin, 90 * time.Second, true},
		{"asctime single-digit day", "Fri Mar  1 12:00:00 2030", fiveMin, 0, true},
		{"date now", "Sun, 10 Mar 2030 12:00:00 GMT", fiveMin, 0, true},
		{"past date", "Sun, 06 Nov 1994 08:49:37 GMT", fiveMin, 0, true},
		{"past RFC 850", "Sunday, 06-Nov-94 08:49:37 GMT", fiveMin, 0, true},
		{"date beyond a duration", "Fri, 31 Dec 9999 23:59:59 GMT", fiveMin, 0, false},
		{"numeric zone", "Sun, 10 Mar 2030 12:01:30 +0000", fiveMin, 0, false},
		{"impossible day", "Sun, 32 Mar 2030 12:01:30 GMT", fiveMin, 0, false},
		{"truncated date", "Sun, 10 Mar 2030", fiveMin, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := channels.ParseRetryAfter(c.in, now, c.max)
			if got != c.want || ok != c.ok {
				t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "-1", "0", "Sun, 10 Mar 2030 12:01:30 GMT", "Sunday, 10-Mar-30 12:01:30 GMT",
		"Sun Mar 10 12:01:30 2030", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT", ""} {
		f.Add(s, int64(5*time.Minute))
	}
	f.Fuzz(func(t *testing.T, v string, max int64) {
		got, ok := channels.ParseRetryAfter(v, now, time.Duration(max))
		if got < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s: negative", v, got)
		}
		if !ok && got != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s with ok false", v, got)
		}
		if max > 0 && got > time.Duration(max) {
			t.Fatalf("ParseRetryAfter(%q) = %s above cap %s", v, got, time.Duration(max))
		}
	})
}
