package channels_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/channels/opentraveltest"
	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// The OpenTravel schemas in testdata/opentravel are OpenTravel's published XSDs (see
// its README); opentraveltest.Validate checks bodies against them with xmllint.

// otaExchange is one OpenTravel request and the simulator's answer to it.
type otaExchange struct {
	message string // OTA_Hotel…Notif
	status  int
	req     []byte
	resp    []byte
}

// otaRecorder serves the simulator and keeps every OpenTravel exchange.
type otaRecorder struct {
	sim *sim.Simulator
	mu  sync.Mutex
	got []otaExchange
}

func (o *otaRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	o.sim.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
	_, msg, ok := strings.Cut(r.URL.Path, wire.OTAPathPrefix)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, otaExchange{message: msg, status: rec.Code, req: body, resp: rec.Body.Bytes()})
}

// TestOpenTravelBodiesValidateAgainstTheSchemas pushes every family through the
// client to the simulator — successes, refused messages, throttling, storms,
// injected errors, a wrong password — and sends the simulator malformed requests,
// then validates every request body the client wrote and every answer the simulator
// gave against OpenTravel's 2017B schemas, and the request bodies against 2003B too.
// The simulator answers in 2017B: a Warning's RPH and the answer's CorrelationID
// are not in 2003B, so only its answers without them (the errors) are checked
// against 2003B as well.
func TestOpenTravelBodiesValidateAgainstTheSchemas(t *testing.T) {
	clk := sim.NewManualClock(time.Date(2030, 4, 1, 12, 0, 0, 0, time.UTC))
	cfg := otaConfig()
	simCfg := cfg
	simCfg.RatePerMinute = 8
	s := sim.New(sim.Config{Channels: []models.ChannelConfig{simCfg}, StaticTokens: []string{"sim-secret"}, Now: clk.Now, Seed: 5})
	rec := &otaRecorder{sim: s}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() { s.Close(); srv.Close() })
	client := func(secret string) *channels.Client {
		return channels.New(srv.Client(), srv.URL, channels.Credentials{ota: channels.StaticCredential(secret)},
			[]models.ChannelConfig{cfg}, 5*time.Second)
	}
	good, wrong := client("hotel-user:sim-secret"), client("hotel-user:wrong")
	version := int64(0)
	requests := func() []models.ChannelRequest {
		version++
		return []models.ChannelRequest{
			rates(propA, version, "129.90", "EUR", "2030-04-10", "2030-04-12"),
			rates(propA, version, "45.125", "KWD", "2030-04-13", "2030-04-13"),
			rates(propA, version, "12000", "JPY", "2030-04-14", "2030-04-20"),
			weekends(rates(propA, version, "99.00", "EUR", "2030-04-21", "2030-05-31")), // Mon … Sun flags
			availability(propA, version, 0, "2030-04-10", "2030-04-11"),
			availability(propA, version, 12, "2030-04-12", "2030-04-12"),
			restrictions(propA,
				restrictionLine(version, "2030-04-10", "2030-04-10", func(l *models.ARILine) {
					l.StopSell, l.CTA, l.CTD, l.MinLOS, l.MaxLOS = bp(true), bp(true), bp(false), ip(2), ip(5)
				}),
				restrictionLine(version, "2030-04-11", "2030-04-11", func(l *models.ARILine) { l.MinLOS = ip(0) }), // refused: RPH warning
				restrictionLine(version, "2030-04-12", "2030-04-14", func(l *models.ARILine) { l.StopSell = bp(false) }),
			),
		}
	}
	pushAll := func(c *channels.Client) {
		for _, req := range requests() {
			req.Channel = ota
			if _, err := c.Push(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Second)
		}
	}
	pushAll(good)            // successes and one partial; then 429s past the limit of 8
	pushAll(good)            // throttled
	clk.Add(2 * time.Minute) // a fresh window
	pushAll(wrong)           // authentication errors inside a 200
	for _, f := range []sim.Faults{
		{ErrorRatio: 1},         // processing errors in 200s and 5xx
		{PartialRatio: 1},       // warnings by RPH
		{CommitThen500Ratio: 1}, // applied, then a 500
		{StormSeconds: 30, StormStatus: http.StatusServiceUnavailable},
	} {
		clk.Add(2 * time.Minute)
		if err := s.SetFaults(f); err != nil {
			t.Fatal(err)
		}
		pushAll(good)
	}
	// Requests the client never sends, for the simulator's answers to them.
	raw := func(ctype, auth, msg, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/"+ota+wire.OTAPathPrefix+msg, strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if auth != "" {
			req.SetBasicAuth("hotel-user", auth)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	clk.Add(2 * time.Minute)
	if err := s.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	raw("application/xml", "", wire.OTARateAmountNotif, `<x/>`)                                       // 401
	raw("text/plain", "sim-secret", wire.OTAInvCountNotif, `<x/>`)                                    // 415
	raw("application/xml", "sim-secret", wire.OTAAvailNotif, `<OTA_HotelAvailNotifRQ xmlns="urn:x">`) // malformed: a long decoder error
	raw("application/xml", "sim-secret", wire.OTAAvailNotif, `<OTA_HotelAvailNotifRQ xmlns="http://www.opentravel.org/OTA/2003/05" EchoToken="e" TimeStamp="2030-04-01T12:00:00Z" Version="1.000"><AvailStatusMessages HotelCode="h"/></OTA_HotelAvailNotifRQ>`)

	// Every kind of answer was seen, so the validation below covers them.
	kinds := map[string]int{}
	for _, x := range rec.got {
		switch body := string(x.resp); {
		case strings.Contains(body, "<Warnings>"):
			kinds["warnings"]++
		case strings.Contains(body, "<Success"):
			kinds["success"]++
		case strings.Contains(body, "<Errors>"):
			kinds[fmt.Sprintf("errors %d", x.status)]++
		}
	}
	t.Logf("%d exchanges; answers: %v", len(rec.got), kinds)
	for _, k := range []string{"success", "warnings", "errors 200", "errors 401", "errors 415", "errors 429", "errors 503", "errors 500"} {
		if kinds[k] == 0 {
			t.Errorf("no answer of kind %q was produced", k)
		}
	}

	requestsBy, answersBy, answers2003 := map[string]map[string][]byte{}, map[string]map[string][]byte{}, map[string]map[string][]byte{}
	add := func(m map[string]map[string][]byte, schema, name string, doc []byte) {
		if m[schema] == nil {
			m[schema] = map[string][]byte{}
		}
		m[schema][name] = doc
	}
	for i, x := range rec.got {
		name := fmt.Sprintf("%03d-%d", i, x.status)
		if bytes.HasPrefix(bytes.TrimSpace(x.req), []byte("<?xml")) && bytes.Contains(x.req, []byte(x.message+"RQ")) &&
			!bytes.Contains(x.req, []byte(`xmlns="urn:x"`)) && !bytes.Contains(x.req, []byte(`HotelCode="h"/>`)) {
			add(requestsBy, x.message+"RQ", name, x.req)
		}
		add(answersBy, x.message+"RS", name, x.resp)
		if !bytes.Contains(x.resp, []byte(" RPH=")) && !bytes.Contains(x.resp, []byte(" CorrelationID=")) {
			add(answers2003, x.message+"RS", name, x.resp)
		}
	}
	for _, msg := range []string{wire.OTARateAmountNotif, wire.OTAAvailNotif, wire.OTAInvCountNotif} {
		for _, release := range []string{"ota2017b", "ota2003b"} {
			opentraveltest.Validate(t, release, msg+"RQ", requestsBy[msg+"RQ"])
		}
		opentraveltest.Validate(t, "ota2017b", msg+"RS", answersBy[msg+"RS"])
		opentraveltest.Validate(t, "ota2003b", msg+"RS", answers2003[msg+"RS"])
	}
	// The golden request bodies, too.
	for f, file := range map[string]string{wire.OTARateAmountNotif: "opentravel_rates.xml",
		wire.OTAAvailNotif: "opentravel_restrictions.xml", wire.OTAInvCountNotif: "opentravel_availability.xml"} {
		doc, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, release := range []string{"ota2017b", "ota2003b"} {
			opentraveltest.Validate(t, release, f+"RQ", map[string][]byte{strings.TrimSuffix(file, ".xml"): doc})
		}
	}
}

// weekends is r with its lines kept to Saturdays and Sundays.
func weekends(r models.ChannelRequest) models.ChannelRequest {
	for i := range r.Lines {
		r.Lines[i].Days = models.Weekdays(1<<time.Saturday | 1<<time.Sunday)
	}
	return r
}
