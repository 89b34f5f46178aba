package sim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

func TestGenericAmountsFollowCurrencyMinorUnits(t *testing.T) {
	s, _ := newSim(t, nil)
	cases := []struct {
		amount, currency string
		status           int
	}{
		{"45.125", "KWD", http.StatusOK},
		{"12000", "JPY", http.StatusOK},
		{"12000.50", "JPY", http.StatusBadRequest},
		{"120.505", "EUR", http.StatusBadRequest},
	}
	for i, c := range cases {
		body := strings.Replace(ratesBody("p1", int64(i+1), c.amount, "2030-04-01", "2030-04-01"), `"EUR"`, `"`+c.currency+`"`, 1)
		if rec := post(s, "k"+c.amount+c.currency, token, body); rec.Code != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.amount, c.currency, rec.Code, rec.Body, c.status)
		}
	}
}

func protocolSim(t *testing.T) *Simulator {
	t.Helper()
	s, _ := newSim(t, func(c *Config) {
		c.Channels = []models.ChannelConfig{
			{Slug: "cx", Protocol: models.ProtocolChannex},
			{Slug: "ox", Protocol: models.ProtocolOpenTravel, RatePerMinute: 100},
		}
	})
	return s
}

func send(s http.Handler, method, path string, h map[string]string, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func TestChannexEndpointsAreStrict(t *testing.T) {
	s := protocolSim(t)
	if st := s.Stats()["cx"]; st.Limit != models.ChannexRequestsPerMinute {
		t.Errorf("channex limit %d, want Channex's %d per property and endpoint", st.Limit, models.ChannexRequestsPerMinute)
	}
	hdr := map[string]string{"Content-Type": "application/json", wire.ChannexAPIKeyHeader: token}
	body := `{"values":[{"property_id":"p","rate_plan_id":"r","date":"2030-04-01","rate":"10.00"}]}`
	if rec := send(s, http.MethodPost, "/cx/api/v1/restrictions", hdr, body); rec.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(rec.Body.String(), models.HeaderUnitVersions) {
		t.Errorf("without versions: %d %s, want 422 naming the header", rec.Code, rec.Body)
	}
	hdr[models.HeaderUnitVersions] = "1"
	if rec := send(s, http.MethodPost, "/cx/api/v1/restrictions", hdr, strings.Replace(body, `"rate"`, `"price"`, 1)); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("unknown field: %d, want 422", rec.Code)
	}
	if rec := send(s, http.MethodPost, "/cx/api/v1/restrictions", hdr, body); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"type":"task"`) {
		t.Errorf("valid change: %d %s", rec.Code, rec.Body)
	}
	days := `{"values":[{"property_id":"p","rate_plan_id":"r","date_from":"2030-04-01","date_to":"2030-04-07","days":["sa","su"],"stop_sell":true}]}`
	before := s.Stats()["cx"].NightsApplied
	if rec := send(s, http.MethodPost, "/cx/api/v1/restrictions", hdr, days); rec.Code != http.StatusOK {
		t.Errorf("days: %d %s", rec.Code, rec.Body)
	}
	if n := s.Stats()["cx"].NightsApplied - before; n != 2 {
		t.Errorf("days sa,su over a week applied %d nights, want 2", n)
	}
	delete(hdr, wire.ChannexAPIKeyHeader)
	if rec := send(s, http.MethodPost, "/cx/api/v1/restrictions", hdr, body); rec.Code != http.StatusUnauthorized {
		t.Errorf("without key: %d", rec.Code)
	}
	if rec := send(s, http.MethodPost, "/cx/ari", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + token}, body); rec.Code != http.StatusNotFound {
		t.Errorf("generic endpoint of a Channex channel: %d, want 404", rec.Code)
	}
}

func TestOpenTravelEndpointsAnswerInsideA200(t *testing.T) {
	s := protocolSim(t)
	msg := `<OTA_HotelRateAmountNotifRQ xmlns="http://www.opentravel.org/OTA/2003/05" EchoToken="e1" TimeStamp="2030-03-10T12:00:00Z" Version="1.000">` +
		`<RateAmountMessages HotelCode="h1"><RateAmountMessage><StatusApplicationControl Start="2030-04-01" End="2030-04-01" InvTypeCode="DBL" RatePlanCode="BAR"/>` +
		`<Rates><Rate><BaseByGuestAmts><BaseByGuestAmt AmountAfterTax="12000.50" CurrencyCode="JPY"/></BaseByGuestAmts></Rate></Rates></RateAmountMessage></RateAmountMessages></OTA_HotelRateAmountNotifRQ>`
	path := "/ox/ota/" + wire.OTARateAmountNotif
	hdr := map[string]string{"Content-Type": "application/xml"}
	if rec := send(s, http.MethodPost, path, hdr, msg); rec.Code != http.StatusUnauthorized {
		t.Errorf("without Basic credentials: %d, want 401", rec.Code)
	}
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/xml")
	req.Header.Set(models.HeaderUnitVersions, "1")
	req.SetBasicAuth("hotel", token)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `RPH="1"`) || !strings.Contains(rec.Body.String(), "<Success>") {
		t.Errorf("JPY with minor units: %d %s, want Success with a warning on message 1", rec.Code, rec.Body)
	}
	req = httptest.NewRequest(http.MethodPost, path, strings.NewReader(strings.Replace(msg, `HotelCode="h1"`, `HotelCode=""`, 1)))
	req.Header.Set("Content-Type", "application/xml")
	req.Header.Set(models.HeaderUnitVersions, "1")
	req.SetBasicAuth("hotel", token)
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "<Errors>") || strings.Contains(rec.Body.String(), "<Success>") {
		t.Errorf("missing HotelCode: %d %s, want Errors inside a 200", rec.Code, rec.Body)
	}
	// OpenTravel's schemas allow 16 characters of HotelCode and InvTypeCode.
	for _, tc := range []struct{ from, to, want string }{
		{`HotelCode="h1"`, `HotelCode="hotel_0123456789a"`, "HotelCode: longer than 16 characters"},
		{`InvTypeCode="DBL"`, `InvTypeCode="DOUBLE_0123456789"`, "InvTypeCode: longer than 16 characters"},
	} {
		body := strings.Replace(strings.Replace(msg, tc.from, tc.to, 1), `EchoToken="e1"`, `EchoToken="`+tc.to[:5]+`"`, 1)
		req = httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/xml")
		req.Header.Set(models.HeaderUnitVersions, "1")
		req.SetBasicAuth("hotel", token)
		rec = httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want %q", tc.to, rec.Code, rec.Body, tc.want)
		}
	}
	if rec := send(s, http.MethodGet, path, nil, ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("read of an OpenTravel channel: %d, want 405", rec.Code)
	}
}
