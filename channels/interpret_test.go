package channels

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

// interpretAnswer classifies one canned answer to call c the way Client.Push does.
func interpretAnswer(p models.Protocol, c call, status int, h http.Header, body string) PushResponse {
	if h == nil {
		h = http.Header{}
	}
	cl := &Client{now: time.Now}
	ch := channel{cfg: goldenConfig(p), proto: protocolOf(p)}
	return cl.classify(ch, c, answer{status: status, header: h, body: []byte(body), at: goldenNow})
}

func encodeGolden(t testing.TB, p models.Protocol, f models.Family) call {
	c, err := protocolOf(p).encode(goldenConfig(p), goldenRequests()[f], goldenNow)
	if err != nil {
		t.Fatal(err)
	}
	c.lines = len(goldenRequests()[f].Lines)
	return c
}

const otaRS = `<?xml version="1.0"?><OTA_HotelAvailNotifRS xmlns="http://www.opentravel.org/OTA/2003/05" CorrelationID="c-1" Version="1.000">%s</OTA_HotelAvailNotifRS>`

func otaBody(inner string) string { return strings.Replace(otaRS, "%s", inner, 1) }

// TestOpenTravelClassification covers the answers an OpenTravel endpoint gives,
// most of them inside a 200.
func TestOpenTravelClassification(t *testing.T) {
	c := encodeGolden(t, models.ProtocolOpenTravel, models.FamilyRestrictions) // 3 lines in 5 messages
	cases := []struct {
		name   string
		status int
		header http.Header
		body   string
		class  Class
		failed []int
	}{
		{"success", 200, nil, otaBody(`<Success/>`), ClassCommitted, nil},
		{"success with advisory warning", 200, nil, otaBody(`<Success/><Warnings><Warning Type="11">check rates</Warning></Warnings>`), ClassCommitted, nil},
		{"warning on the third message is line 0", 200, nil, otaBody(`<Success/><Warnings><Warning Type="3" Code="321" RPH="3">bad</Warning></Warnings>`), ClassPartial, []int{0}},
		{"warning on the fifth message is line 2", 200, nil, otaBody(`<Success/><Warnings><Warning Type="3" RPH="5" ShortText="min los"/></Warnings>`), ClassPartial, []int{2}},
		{"warnings on every line", 200, nil, otaBody(`<Success/><Warnings><Warning Type="3" RPH="1"/><Warning Type="3" RPH="4"/><Warning Type="3" RPH="5"/></Warnings>`), ClassRejected, []int{0, 1, 2}},
		{"business rule error in a 200", 200, nil, otaBody(`<Errors><Error Type="3" Code="392" ShortText="Invalid hotel code"/></Errors>`), ClassRejected, nil},
		{"required field error in a 200", 200, nil, otaBody(`<Errors><Error Type="10" ShortText="EchoToken"/></Errors>`), ClassRejected, nil},
		{"authentication error in a 200", 200, nil, otaBody(`<Errors><Error Type="4" Code="497" ShortText="Authorization error"/></Errors>`), ClassAuthExpired, nil},
		{"processing exception in a 200", 200, nil, otaBody(`<Errors><Error Type="12" Code="450" ShortText="Unable to process"/></Errors>`), ClassTransient, nil},
		{"errors beat success", 200, nil, otaBody(`<Success/><Errors><Error Type="3" ShortText="no"/></Errors>`), ClassRejected, nil},
		{"neither success nor errors", 200, nil, otaBody(``), ClassTransient, nil},
		{"not XML", 200, nil, `<html>gateway</html>`, ClassTransient, nil},
		{"foreign namespace", 200, nil, `<OTA_HotelAvailNotifRS xmlns="urn:other"><Success/></OTA_HotelAvailNotifRS>`, ClassTransient, nil},
		{"HTTP 401", 401, nil, ``, ClassAuthExpired, nil},
		{"HTTP 429 with Retry-After", 429, http.Header{"Retry-After": {"7"}}, otaBody(`<Errors><Error Type="12"/></Errors>`), ClassThrottled, nil},
		{"HTTP 500", 500, nil, otaBody(`<Errors><Error Type="13" ShortText="boom"/></Errors>`), ClassTransient, nil},
		{"HTTP 400", 400, nil, `bad request`, ClassRejected, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := interpretAnswer(models.ProtocolOpenTravel, c, tc.status, tc.header, tc.body)
			if got.Class != tc.class {
				t.Fatalf("class %s (%s), want %s", got.Class, got.Message, tc.class)
			}
			var lines []int
			for _, f := range got.Failed {
				lines = append(lines, f.Line)
			}
			if len(lines) != len(tc.failed) || (len(lines) > 0 && !slices.Equal(lines, tc.failed)) {
				t.Errorf("failed lines %v, want %v", lines, tc.failed)
			}
			if (got.Class == ClassCommitted || got.Class == ClassPartial) && got.ConfirmationID != "c-1" {
				t.Errorf("confirmation %q, want the CorrelationID", got.ConfirmationID)
			}
			if got.Class == ClassThrottled && (!got.ServerWait || got.RetryAfter != 7*time.Second) {
				t.Errorf("wait %s %v, want 7s from Retry-After", got.RetryAfter, got.ServerWait)
			}
		})
	}
}

// TestChannexClassification covers Channex's answers, including refused change
// objects inside a 200.
func TestChannexClassification(t *testing.T) {
	c := encodeGolden(t, models.ProtocolChannex, models.FamilyRates)
	nrf := `"rate_plan_id":"5c0d4e1f-8a2b-4c3d-9e4f-1a2b3c4d5e6f","date":"2030-04-10"`
	cases := []struct {
		name   string
		status int
		body   string
		class  Class
		failed []int
	}{
		{"success", 200, `{"data":[{"id":"t-1","type":"task"}],"meta":{"message":"Success"}}`, ClassCommitted, nil},
		{"warning names line 1", 200, `{"data":[{"id":"t-1","type":"task"}],"meta":{"message":"Success","warnings":[{` + nrf + `,"warning":{"rate":["must be greater than 0"]}}]}}`, ClassPartial, []int{1}},
		{"warning we cannot place fails every line", 200, `{"data":[{"id":"t-1","type":"task"}],"meta":{"warnings":[{"rate_plan_id":"other","warning":"no"}]}}`, ClassRejected, []int{0, 1, 2}},
		{"errors inside a 200", 200, `{"errors":{"code":"validation_error","title":"Validation Error"}}`, ClassRejected, nil},
		{"unreadable 200", 200, `{"data":`, ClassTransient, nil},
		{"empty 200", 200, ``, ClassTransient, nil},
		{"200 without a task", 200, `{"meta":{"message":"Success"}}`, ClassTransient, nil},
		{"429 without headers", 429, `{"errors":{"code":"http_too_many_requests","title":"Too Many Requests"}}`, ClassThrottled, nil},
		{"401", 401, `{"errors":{"code":"unauthorized","title":"Unauthorized"}}`, ClassAuthExpired, nil},
		{"422", 422, `{"errors":{"code":"validation_error","title":"Validation Error","details":{"values":["required"]}}}`, ClassRejected, nil},
		{"502 html", 502, `<html>bad gateway</html>`, ClassTransient, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := interpretAnswer(models.ProtocolChannex, c, tc.status, nil, tc.body)
			if got.Class != tc.class {
				t.Fatalf("class %s (%s), want %s", got.Class, got.Message, tc.class)
			}
			var lines []int
			for _, f := range got.Failed {
				lines = append(lines, f.Line)
			}
			if !slices.Equal(lines, tc.failed) {
				t.Errorf("failed lines %v, want %v", lines, tc.failed)
			}
			if got.Class == ClassThrottled && (got.ServerWait || got.HasRateLimit || !strings.Contains(got.Message, wire.ChannexTooManyRequests)) {
				t.Errorf("429: %+v; want no server wait, no rate limit, Channex's code in the message", got)
			}
			if got.Class == ClassPartial && (got.Accepted != 2 || got.ConfirmationID != "t-1" || !strings.Contains(got.Failed[0].Message, "rate: must be greater than 0")) {
				t.Errorf("partial: %+v", got)
			}
		})
	}
}

// checkInvariants holds for every classified answer, whatever the body.
func checkInvariants(t *testing.T, c call, got PushResponse) {
	t.Helper()
	switch got.Class {
	case ClassCommitted, ClassPartial, ClassThrottled, ClassTransient, ClassAuthExpired, ClassQuotaExhausted, ClassRejected:
	default:
		t.Fatalf("unknown class %q", got.Class)
	}
	if got.Class == ClassCommitted && (len(got.Failed) > 0 || got.Accepted != c.lines) {
		t.Fatalf("committed with %d failed, %d accepted of %d", len(got.Failed), got.Accepted, c.lines)
	}
	if got.Class == ClassPartial && (len(got.Failed) == 0 || got.Accepted == 0 || got.Accepted+len(got.Failed) != c.lines) {
		t.Fatalf("partial: %d accepted, %d failed of %d", got.Accepted, len(got.Failed), c.lines)
	}
	seen := map[int]bool{}
	for _, f := range got.Failed {
		if f.Line < 0 || f.Line >= c.lines || seen[f.Line] {
			t.Fatalf("failed line %d out of range or repeated", f.Line)
		}
		seen[f.Line] = true
	}
	if len(got.Message) > maxMessageLen+len("…") {
		t.Fatalf("message of %d bytes", len(got.Message))
	}
}

// fuzzAnswer classifies any status and body as an answer to a golden push of
// family over p: checkInvariants holds, and so does check, the protocol's own rule.
func fuzzAnswer(f *testing.F, p models.Protocol, family models.Family, check func(t *testing.T, body string, got PushResponse)) {
	c := encodeGolden(f, p, family)
	f.Fuzz(func(t *testing.T, status int, body string) {
		if status < 100 || status > 599 {
			return
		}
		got := interpretAnswer(p, c, status, nil, body)
		checkInvariants(t, c, got)
		check(t, body, got)
	})
}

func FuzzOpenTravelResponse(f *testing.F) {
	f.Add(200, otaBody(`<Success/>`))
	f.Add(200, otaBody(`<Success/><Warnings><Warning Type="3" RPH="2"/></Warnings>`))
	f.Add(200, otaBody(`<Errors><Error Type="12"/></Errors>`))
	f.Add(500, `<x/>`)
	f.Add(200, `<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><OTA_HotelAvailNotifRS xmlns="http://www.opentravel.org/OTA/2003/05">&e;<Success/></OTA_HotelAvailNotifRS>`)
	fuzzAnswer(f, models.ProtocolOpenTravel, models.FamilyRestrictions, func(t *testing.T, body string, got PushResponse) {
		if resp, err := decodeOTAResponse([]byte(body)); err == nil && len(resp.ErrorList()) > 0 && got.Class == ClassCommitted {
			t.Fatalf("an <Errors> answer was committed")
		}
	})
}

func FuzzChannexResponse(f *testing.F) {
	f.Add(200, `{"data":[{"id":"t","type":"task"}],"meta":{"message":"Success"}}`)
	f.Add(200, `{"data":[],"meta":{"warnings":[{"rate_plan_id":"bab451e7-9ab1-4cc4-aa16-107bf7bbabb2","date_from":"2030-04-10","date_to":"2030-04-12","warning":"x"}]}}`)
	f.Add(429, `{"errors":{"code":"http_too_many_requests","title":"Too Many Requests"}}`)
	f.Add(200, `{"errors":{"code":"x"}}`)
	fuzzAnswer(f, models.ProtocolChannex, models.FamilyRates, func(t *testing.T, body string, got PushResponse) {
		if resp, err := decodeChannexResponse([]byte(body)); err == nil && resp.Errors != nil && got.Class == ClassCommitted {
			t.Fatalf("an errors answer was committed")
		}
	})
}
