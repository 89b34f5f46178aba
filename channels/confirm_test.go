package channels_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// A commit is what the channel confirmed: these tests answer pushes with 200s whose
// bodies confirm nothing, over real HTTP, and check that none is taken as a commit.

// genericConfig is a paritysync-protocol channel.
func genericConfig() models.ChannelConfig {
	return models.NewChannelConfig("generic", 30)
}

// protocolCase is one protocol's harness and a push it carries.
type protocolCase struct {
	name   string
	cfg    func() models.ChannelConfig
	simCfg func(*models.ChannelConfig)
	secret string
	req    models.ChannelRequest
}

func protocolCases() []protocolCase {
	return []protocolCase{
		{name: "paritysync", cfg: genericConfig, secret: "sim-secret",
			req: rates(propA, 2, "100", "EUR", "2030-04-10", "2030-04-12")},
		{name: "channex", cfg: func() models.ChannelConfig { return models.NewChannexChannel(channex, channexMapping()) },
			simCfg: func(c *models.ChannelConfig) { c.RatePerMinute = models.ChannexRequestsPerMinute },
			secret: "sim-secret", req: rates(propA, 2, "100", "EUR", "2030-04-10", "2030-04-12")},
		{name: "opentravel", cfg: otaConfig, secret: "hotel-user:sim-secret",
			req: rates(propA, 2, "100", "EUR", "2030-04-10", "2030-04-12")},
	}
}

// TestA200ThatConfirmsNothingIsNeverACommit runs every protocol against the
// simulator's bad-body fault: an HTML page, an empty body, half a success answer and
// the protocol's error shape, each in a 200. None is committed or partial, each says
// why in the channel's words, and the channel holds nothing.
func TestA200ThatConfirmsNothingIsNeverACommit(t *testing.T) {
	kinds := []struct {
		kind  string
		class map[string]channels.Class // by protocol; transient when absent
		words string                    // in the message
	}{
		{kind: sim.BadBodyHTML, words: "The upstream server is not answering"},
		{kind: sim.BadBodyEmpty, words: "empty body"},
		{kind: sim.BadBodyTruncated, words: "unreadable answer"},
		{kind: sim.BadBodyError, words: "injected error inside a 200", class: map[string]channels.Class{
			"paritysync": channels.ClassRejected, "channex": channels.ClassRejected, "opentravel": channels.ClassRejected}},
	}
	for _, pc := range protocolCases() {
		for _, k := range kinds {
			t.Run(pc.name+"/"+k.kind, func(t *testing.T) {
				h := newProtoHarness(t, pc.cfg(), pc.simCfg, func(c *sim.Config) {
					c.Faults.BadBodyRatio, c.Faults.BadBody = 1, k.kind
				}, pc.secret)
				resp := h.push(t, pc.req)
				class := channels.ClassTransient
				if c, ok := k.class[pc.name]; ok {
					class = c
				}
				want(t, resp, class, 200)
				if resp.Accepted != 0 || resp.ConfirmationID != "" || len(resp.Failed) != 0 {
					t.Errorf("a refused answer confirms: %+v", resp)
				}
				if !strings.Contains(resp.Message, k.words) {
					t.Errorf("message %q, want the channel's words %q", resp.Message, k.words)
				}
				if s := h.stats(); s.NightsApplied != 0 || s.Accepted != 0 {
					t.Errorf("channel applied %d nights, accepted %d", s.NightsApplied, s.Accepted)
				}
				// The same push once the channel answers properly commits.
				if err := h.sim.SetFaults(sim.Faults{}); err != nil {
					t.Fatal(err)
				}
				want(t, h.push(t, pc.req), channels.ClassCommitted, 200)
			})
		}
	}
}

// TestForeign200BodiesAreClassified answers each protocol's push with hand-written
// 200s a real channel or a proxy in front of it might give, over real HTTP: the
// bodies echo the request's Authorization header, which never reaches a message.
func TestForeign200BodiesAreClassified(t *testing.T) {
	type answer struct {
		name  string
		ctype string
		body  string
		class channels.Class
		words string
	}
	common := []answer{
		{"html echoing the request", "text/html", `<html><body>Bad gateway. You sent: {{auth}}</body></html>`, channels.ClassTransient, "Bad gateway"},
		{"empty", "", ``, channels.ClassTransient, "empty body"},
		{"whitespace", "", "  \n", channels.ClassTransient, "empty body"},
		{"json null", "application/json", `null`, channels.ClassTransient, ""},
		{"json array", "application/json", `[]`, channels.ClassTransient, ""},
	}
	byProto := map[string][]answer{
		"paritysync": {
			{"error object", "application/json", `{"error":"invalid"}`, channels.ClassRejected, "invalid"},
			{"error with message", "application/json", `{"error":"invalid","message":"lines[0].amount: required"}`, channels.ClassRejected, "lines[0].amount: required"},
			{"quota error in a 200", "application/json", `{"error":"quota_exhausted","message":"daily quota used"}`, channels.ClassQuotaExhausted, "daily quota"},
			{"server error in a 200", "application/json", `{"error":"server_error"}`, channels.ClassTransient, "server_error"},
			{"truncated", "application/json", `{"confirmation_id":"c-1","acc`, channels.ClassTransient, "unreadable"},
			{"no confirmation", "application/json", `{"accepted":3}`, channels.ClassTransient, "confirmation_id"},
			{"fewer lines accepted", "application/json", `{"confirmation_id":"c-1","accepted":1}`, channels.ClassTransient, "accepts 1 of 3"},
			{"207 without a result per line", "application/json", `{"confirmation_id":"c-1","results":[{"line":0,"status":"ok"}]}`, channels.ClassTransient, "one result per line"},
			{"accepted", "application/json", `{"confirmation_id":"c-1","accepted":3}`, channels.ClassCommitted, ""},
		},
		"channex": {
			{"foreign error object", "application/json", `{"error":"invalid"}`, channels.ClassTransient, "invalid"},
			{"channex errors", "application/json", `{"errors":{"code":"validation_error","title":"Validation Error"}}`, channels.ClassRejected, "validation_error"},
			{"truncated", "application/json", `{"data":[{"id":"t-1","ty`, channels.ClassTransient, "unreadable"},
			{"no task", "application/json", `{"meta":{"message":"Success"}}`, channels.ClassTransient, "without a task"},
			{"task without id", "application/json", `{"data":[{"type":"task"}],"meta":{"message":"Success"}}`, channels.ClassTransient, "without a task"},
			{"accepted", "application/json", `{"data":[{"id":"t-1","type":"task"}],"meta":{"message":"Success"}}`, channels.ClassCommitted, ""},
		},
		"opentravel": {
			{"errors", "application/xml", `<OTA_HotelRateAmountNotifRS xmlns="http://www.opentravel.org/OTA/2003/05" Version="1.000"><Errors><Error Type="3" Code="392" ShortText="Invalid hotel code"/></Errors></OTA_HotelRateAmountNotifRS>`, channels.ClassRejected, "Invalid hotel code"},
			{"truncated", "application/xml", `<OTA_HotelRateAmountNotifRS xmlns="http://www.opentravel.org/OTA/2003/05" Version="1.000"><Succ`, channels.ClassTransient, "unreadable"},
			{"neither success nor errors", "application/xml", `<OTA_HotelRateAmountNotifRS xmlns="http://www.opentravel.org/OTA/2003/05" Version="1.000"/>`, channels.ClassTransient, "without Success"},
			{"another message's answer", "application/xml", `<OTA_HotelAvailNotifRS xmlns="http://www.opentravel.org/OTA/2003/05" Version="1.000"><Success/></OTA_HotelAvailNotifRS>`, channels.ClassTransient, "OTA_HotelAvailNotifRS"},
			{"another EchoToken", "application/xml", `<OTA_HotelRateAmountNotifRS xmlns="http://www.opentravel.org/OTA/2003/05" EchoToken="someone-else" Version="1.000"><Success/></OTA_HotelRateAmountNotifRS>`, channels.ClassTransient, "EchoToken"},
			{"json error", "application/json", `{"error":"invalid"}`, channels.ClassTransient, "invalid"},
			{"accepted", "application/xml", `<OTA_HotelRateAmountNotifRS xmlns="http://www.opentravel.org/OTA/2003/05" CorrelationID="c-1" Version="1.000"><Success/></OTA_HotelRateAmountNotifRS>`, channels.ClassCommitted, ""},
		},
	}
	for _, pc := range protocolCases() {
		for _, a := range append(common, byProto[pc.name]...) {
			t.Run(pc.name+"/"+a.name, func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					status := http.StatusOK
					if strings.HasPrefix(a.name, "207") {
						status = http.StatusMultiStatus
					}
					if a.ctype != "" {
						w.Header().Set("Content-Type", a.ctype)
					}
					w.WriteHeader(status)
					_, _ = w.Write([]byte(strings.ReplaceAll(a.body, "{{auth}}", r.Header.Get("Authorization")+" "+pc.secret)))
				}))
				t.Cleanup(srv.Close)
				cfg := pc.cfg()
				c := channels.New(srv.Client(), srv.URL, channels.Credentials{cfg.Slug: channels.StaticCredential(pc.secret)},
					[]models.ChannelConfig{cfg}, 5*time.Second)
				req := pc.req
				req.Channel = cfg.Slug
				req.Lines = append(req.Lines, req.Lines[0], req.Lines[0])[:3] // three lines
				req.Lines[1].From, req.Lines[1].To = d("2030-04-13"), d("2030-04-13")
				req.Lines[2].From, req.Lines[2].To = d("2030-04-14"), d("2030-04-14")
				resp, err := c.Push(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Class != a.class {
					t.Fatalf("class %s (%s), want %s", resp.Class, resp.Message, a.class)
				}
				if a.class != channels.ClassCommitted && (resp.Accepted != 0 || resp.ConfirmationID != "") {
					t.Errorf("an answer that confirms nothing confirms: %+v", resp)
				}
				if !strings.Contains(resp.Message, a.words) {
					t.Errorf("message %q, want %q", resp.Message, a.words)
				}
				_, pass, _ := strings.Cut(pc.secret, ":")
				if strings.Contains(resp.Message, pc.secret) || pass != "" && strings.Contains(resp.Message, pass) ||
					strings.Contains(resp.Message, "Basic ") && !strings.Contains(resp.Message, "Basic [redacted]") {
					t.Errorf("message leaks the credential: %q", resp.Message)
				}
			})
		}
	}
}
