package channels

import (
	"encoding/json"
	"encoding/xml"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

var update = flag.Bool("update", false, "rewrite the golden request bodies in testdata/")

var goldenNow = time.Date(2030, 4, 1, 9, 30, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func amount(s string) *decimal.Decimal {
	d := decimal.RequireFromString(s)
	return &d
}

func day(s string) models.Date {
	d, err := models.ParseDate(s)
	if err != nil {
		panic(err)
	}
	return d
}

// goldenMapping maps prop_0a1b2c3d: two room types, three rate plans, prices in KWD
// so the golden bodies show three minor units.
func goldenMapping() models.ChannexMapping {
	return models.ChannexMapping{Properties: map[string]models.ChannexProperty{
		"prop_0a1b2c3d": {
			PropertyID: "716305c4-561a-4561-a187-7f5b8aeb5920", Currency: "KWD",
			RoomTypes: map[string]string{
				"DBL": "994d1375-dbbd-4072-8724-b2ab32ce781b",
				"SGL": "0a7a6b3e-3c4f-4c6d-9a0e-2f1b5d8c7e61",
			},
			RatePlans: map[string]string{
				"DBL/BAR": "bab451e7-9ab1-4cc4-aa16-107bf7bbabb2",
				"DBL/NRF": "5c0d4e1f-8a2b-4c3d-9e4f-1a2b3c4d5e6f",
				"SGL/BAR": "e2f3a4b5-c6d7-4e8f-9a0b-1c2d3e4f5a6b",
			},
		},
	}}
}

// goldenRequests are one request per family with single nights and ranges, every
// value a family can carry, and a line per room type and rate plan.
func goldenRequests() map[models.Family]models.ChannelRequest {
	base := models.ChannelRequest{Channel: "golden", PropertyID: "prop_0a1b2c3d", Priority: 3}
	rates, avail, restr := base, base, base
	rates.Family = models.FamilyRates
	rates.Lines = []models.ARILine{
		{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: day("2030-04-10"), To: day("2030-04-12"), Values: models.Values{Amount: amount("45.125"), Currency: "KWD"}, Version: 7},
		{RoomTypeCode: "DBL", RatePlanCode: "NRF", From: day("2030-04-10"), To: day("2030-04-10"), Values: models.Values{Amount: amount("40"), Currency: "KWD"}, Version: 8},
		{RoomTypeCode: "SGL", RatePlanCode: "BAR", From: day("2030-05-01"), To: day("2030-05-31"), Values: models.Values{Amount: amount("30.5"), Currency: "KWD"}, Version: 9},
	}
	avail.Family = models.FamilyAvailability
	avail.Lines = []models.ARILine{
		{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: day("2030-04-10"), To: day("2030-04-14"), Values: models.Values{Inventory: ptr(4)}, Version: 3},
		{RoomTypeCode: "SGL", RatePlanCode: "BAR", From: day("2030-04-11"), To: day("2030-04-11"), Values: models.Values{Inventory: ptr(0)}, Version: 4},
	}
	restr.Family = models.FamilyRestrictions
	restr.Lines = []models.ARILine{
		{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: day("2030-04-10"), To: day("2030-04-11"),
			Values: models.Values{StopSell: ptr(false), MinLOS: ptr(2), MaxLOS: ptr(14), CTA: ptr(true), CTD: ptr(false)}, Version: 5},
		{RoomTypeCode: "SGL", RatePlanCode: "BAR", From: day("2030-04-12"), To: day("2030-04-12"), Values: models.Values{StopSell: ptr(true)}, Version: 6},
		{RoomTypeCode: "DBL", RatePlanCode: "NRF", From: day("2030-04-13"), To: day("2030-04-20"), Values: models.Values{MinLOS: ptr(3)}, Version: 2},
	}
	return map[models.Family]models.ChannelRequest{models.FamilyRates: rates, models.FamilyAvailability: avail, models.FamilyRestrictions: restr}
}

func goldenConfig(p models.Protocol) models.ChannelConfig {
	if p == models.ProtocolChannex {
		return models.NewChannexChannel("golden", goldenMapping())
	}
	c := models.NewChannelConfig("golden", 60)
	c.Protocol = p
	return c
}

// TestGoldenRequestBodies pins the wire body of every protocol and family, then
// decodes each golden body back into lines and compares them with the lines it was
// made from, so a golden file can only be accepted if it still says the same thing.
func TestGoldenRequestBodies(t *testing.T) {
	for _, p := range models.Protocols {
		for _, f := range models.Families {
			name := string(p) + "_" + string(f)
			t.Run(name, func(t *testing.T) {
				cfg := goldenConfig(p)
				req := goldenRequests()[f]
				c, err := protocolOf(p).encode(cfg, req, goldenNow)
				if err != nil {
					t.Fatal(err)
				}
				ext := ".json"
				if p == models.ProtocolOpenTravel {
					ext = ".xml"
				}
				path := filepath.Join("testdata", name+ext)
				body := c.body
				if ext == ".json" {
					var v any
					if err := json.Unmarshal(body, &v); err != nil {
						t.Fatal(err)
					}
					body, _ = json.MarshalIndent(v, "", "  ")
				}
				if *update {
					if err := os.WriteFile(path, append(body, '\n'), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				golden, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test ./channels -run TestGoldenRequestBodies -update)", err)
				}
				if got, want := strings.TrimSpace(string(body)), strings.TrimSpace(string(golden)); got != want {
					t.Errorf("body of %s changed:\n%s\nwant (%s):\n%s", name, got, path, want)
				}
				lines, versions := decodeBack(t, p, cfg, f, golden, c)
				want := req.Lines
				for i := range want {
					if i < len(versions) && versions[i] != want[i].Version {
						t.Errorf("line %d version %d on the wire, want %d", i, versions[i], want[i].Version)
					}
				}
				if !reflect.DeepEqual(lines, stripVersions(want)) {
					t.Errorf("decoded back:\n%+v\nwant\n%+v", lines, stripVersions(want))
				}
			})
		}
	}
}

func stripVersions(ls []models.ARILine) []models.ARILine {
	out := make([]models.ARILine, len(ls))
	for i, l := range ls {
		l.Version = 0
		if l.Amount != nil {
			// Wire amounts carry the currency's places; compare values.
			a := l.Amount.Round(3)
			l.Amount = &a
		}
		out[i] = l
	}
	return out
}

// decodeBack turns a golden body into the lines it carries (versions zeroed) and
// the version of each line, from the body or the unit versions of the call.
func decodeBack(t *testing.T, p models.Protocol, cfg models.ChannelConfig, f models.Family, body []byte, c call) ([]models.ARILine, []int64) {
	t.Helper()
	switch p {
	case models.ProtocolParitySync:
		var r models.ARIRequest
		if err := json.Unmarshal(body, &r); err != nil || r.Family != f {
			t.Fatalf("decode: %v, family %s", err, r.Family)
		}
		var vs []int64
		for _, l := range r.Lines {
			vs = append(vs, l.Version)
		}
		return stripVersions(r.Lines), vs
	case models.ProtocolChannex:
		return decodeChannexBack(t, cfg, f, body), c.versions
	}
	return decodeOTABack(t, f, body, c), nil
}

func decodeChannexBack(t *testing.T, cfg models.ChannelConfig, f models.Family, body []byte) []models.ARILine {
	prop := cfg.Channex.Properties["prop_0a1b2c3d"]
	byID := map[string][2]string{}
	for k, id := range prop.RatePlans {
		room, plan, _ := strings.Cut(k, "/")
		byID[id] = [2]string{room, plan}
	}
	roomByID := map[string]string{}
	for room, id := range prop.RoomTypes {
		roomByID[id] = room
	}
	dates := func(d, from, to models.Date) (models.Date, models.Date) {
		if !d.IsZero() {
			return d, d
		}
		return from, to
	}
	var out []models.ARILine
	if f == models.FamilyAvailability {
		var v wire.ChannexValues[wire.ChannexAvailability]
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		for _, a := range v.Values {
			l := models.ARILine{RoomTypeCode: roomByID[a.RoomTypeID], Values: models.Values{Inventory: a.Availability}}
			l.From, l.To = dates(a.Date, a.DateFrom, a.DateTo)
			// The availability line's rate plan is not on the wire (Channex holds
			// availability per room type); the golden lines all use BAR.
			l.RatePlanCode = "BAR"
			out = append(out, l)
		}
		return out
	}
	var v wire.ChannexValues[wire.ChannexRestriction]
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	for _, r := range v.Values {
		rp := byID[r.RatePlanID]
		l := models.ARILine{RoomTypeCode: rp[0], RatePlanCode: rp[1], Values: models.Values{StopSell: r.StopSell,
			MinLOS: r.MinStayArrival, MaxLOS: r.MaxStay, CTA: r.ClosedToArrival, CTD: r.ClosedToDeparture}}
		if r.Rate != "" {
			l.Amount, l.Currency = amount(r.Rate), prop.Currency
			a := l.Amount.Round(3)
			l.Amount = &a
		}
		l.From, l.To = dates(r.Date, r.DateFrom, r.DateTo)
		out = append(out, l)
	}
	return out
}

func decodeOTABack(t *testing.T, f models.Family, body []byte, c call) []models.ARILine {
	line := func(ctl wire.OTAStatusApplicationControl) models.ARILine {
		return models.ARILine{RoomTypeCode: ctl.InvTypeCode, RatePlanCode: ctl.RatePlanCode, From: ctl.Start, To: ctl.End}
	}
	var out []models.ARILine
	switch f {
	case models.FamilyRates:
		m := unmarshalXML[wire.OTAHotelRateAmountNotifRQ](t, body)
		checkOTAHeader(t, m.OTAHeader, m.RateAmountMessages.HotelCode)
		for _, rm := range m.RateAmountMessages.Messages {
			l := line(rm.StatusApplicationControl)
			a := rm.Rates[0].BaseByGuestAmts[0]
			l.Amount, l.Currency = amount(a.AmountAfterTax), a.CurrencyCode
			r := l.Amount.Round(3)
			l.Amount = &r
			out = append(out, l)
		}
	case models.FamilyAvailability:
		m := unmarshalXML[wire.OTAHotelInvCountNotifRQ](t, body)
		checkOTAHeader(t, m.OTAHeader, m.Inventories.HotelCode)
		for _, inv := range m.Inventories.Inventories {
			l := line(inv.StatusApplicationControl)
			l.Inventory = &inv.InvCounts[0].Count
			out = append(out, l)
		}
	default:
		m := unmarshalXML[wire.OTAHotelAvailNotifRQ](t, body)
		checkOTAHeader(t, m.OTAHeader, m.AvailStatusMessages.HotelCode)
		// Several messages may carry one line; c.units says which.
		for i, am := range m.AvailStatusMessages.Messages {
			if c.line(i) == len(out) {
				out = append(out, line(am.StatusApplicationControl))
			}
			l := &out[c.line(i)]
			if am.LengthsOfStay != nil {
				for _, los := range am.LengthsOfStay.LengthOfStay {
					if los.MinMaxMessageType == wire.OTASetMinLOS {
						l.MinLOS = ptr(los.Time)
					} else {
						l.MaxLOS = ptr(los.Time)
					}
				}
			}
			if rs := am.RestrictionStatus; rs != nil {
				closed := rs.Status == wire.OTAStatusClose
				if value := wire.OTARestrictionValue(rs.Restriction, &l.Values); value != nil {
					*value = &closed
				}
			}
		}
	}
	return out
}

// unmarshalXML is body read as a T; the test stops if it is not one.
func unmarshalXML[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := xml.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func checkOTAHeader(t *testing.T, h wire.OTAHeader, hotel string) {
	t.Helper()
	if len(h.EchoToken) != 64 || h.TimeStamp != "2030-04-01T09:30:00Z" || h.Version != wire.OTAVersion || hotel != "prop_0a1b2c3d" {
		t.Errorf("header %+v hotel %s: want the idempotency key as EchoToken, the send time, version %s", h, hotel, wire.OTAVersion)
	}
}

// TestEchoTokenIsTheIdempotencyKey: a retry of the same request carries the same
// EchoToken, whatever the time.
func TestEchoTokenIsTheIdempotencyKey(t *testing.T) {
	req := goldenRequests()[models.FamilyRates]
	c1, _ := openTravel{}.encode(goldenConfig(models.ProtocolOpenTravel), req, goldenNow)
	c2, _ := openTravel{}.encode(goldenConfig(models.ProtocolOpenTravel), req, goldenNow.Add(time.Minute))
	var m1, m2 wire.OTAHotelRateAmountNotifRQ
	_ = xml.Unmarshal(c1.body, &m1)
	_ = xml.Unmarshal(c2.body, &m2)
	if m1.EchoToken != req.IdempotencyKey() || m2.EchoToken != m1.EchoToken || m1.TimeStamp == m2.TimeStamp {
		t.Errorf("echo tokens %s, %s (key %s), timestamps %s, %s", m1.EchoToken, m2.EchoToken, req.IdempotencyKey(), m1.TimeStamp, m2.TimeStamp)
	}
	if got := strconv.Itoa(len(c1.units)); got != "3" {
		t.Errorf("units %s", got)
	}
}

func TestChannexRefusesABodyOverTenMegabytes(t *testing.T) {
	req := goldenRequests()[models.FamilyAvailability]
	line := req.Lines[0]
	req.Lines = nil
	for range 80_000 {
		req.Lines = append(req.Lines, line)
	}
	_, err := channex{}.encode(goldenConfig(models.ProtocolChannex), req, goldenNow)
	if err == nil || !strings.Contains(err.Error(), "Channex takes at most") {
		t.Errorf("a %d-line request: %v, want it refused for its size", len(req.Lines), err)
	}
}
