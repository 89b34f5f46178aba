package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
)

func writeChannels(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestLoadChannelsDefaults(t *testing.T) {
	got, err := LoadChannels("", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	m := models.ChannelMap(got)
	for slug, perMinute := range map[string]int{"booking_com": 90, "expedia": 60, "agoda": 120} {
		if m[slug].RatePerMinute != perMinute {
			t.Errorf("%s rate = %d, want %d", slug, m[slug].RatePerMinute, perMinute)
		}
	}
	if len(got) != 3 || got[0].Slug != "booking_com" {
		t.Errorf("channels = %v", got)
	}
}

func TestLoadChannelsYAMLOverridesOnlyWhatItSets(t *testing.T) {
	path := writeChannels(t, `
channels:
  - slug: expedia
    rate_per_minute: 40
    max_retry_after: 90s
    max_apply_delay: 2s
    shares: {rates: 40, availability: 40}
  - slug: hotelbeds
    burst: 3
    scope: property
    quota_unit: lines
`)
	got, err := LoadChannels(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	m := models.ChannelMap(got)
	exp := m["expedia"]
	want := models.NewChannelConfig("expedia", 60)
	want.RatePerMinute, want.MaxRetryAfter, want.MaxApplyDelay = 40, 90*time.Second, 2*time.Second
	want.Shares = models.FamilyShares{Rates: 40, Availability: 40, Restrictions: 20}
	if !reflect.DeepEqual(exp, want) {
		t.Errorf("expedia = %+v\nwant      %+v", exp, want)
	}
	if !reflect.DeepEqual(m["booking_com"], models.NewChannelConfig("booking_com", 90)) {
		t.Errorf("booking_com changed: %+v", m["booking_com"])
	}
	hb, ok := m["hotelbeds"]
	if !ok || len(got) != 4 || got[3].Slug != "hotelbeds" {
		t.Fatalf("new channel not appended: %v", got)
	}
	wantHB := models.NewChannelConfig("hotelbeds", models.DefaultRatePerMinute)
	wantHB.Burst, wantHB.Scope, wantHB.QuotaUnit = 3, models.ScopeProperty, models.QuotaLines
	if !reflect.DeepEqual(hb, wantHB) {
		t.Errorf("hotelbeds = %+v\nwant        %+v", hb, wantHB)
	}
}

func TestLoadChannelsNewChannelBurstFollowsItsRate(t *testing.T) {
	path := writeChannels(t, "channels:\n  - slug: trip_com\n    rate_per_minute: 300\n")
	got, err := LoadChannels(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := models.ChannelMap(got)["trip_com"]; c.RatePerMinute != 300 || c.Burst != 30 || c.BasePath != "/trip_com" {
		t.Errorf("trip_com = %+v", c)
	}
}

// The window is 60 s unless a channel's own entry declares another; the
// environment cannot change it.
func TestLoadChannelsWindowOnlyFromTheChannelsEntry(t *testing.T) {
	path := writeChannels(t, "channels:\n  - slug: agoda\n    window: 6s\n")
	got, err := LoadChannels(path, env(map[string]string{
		"PARITYSYNC_CHANNEL_EXPEDIA_WINDOW": "6s", "PARITYSYNC_WINDOW": "6s"}))
	if err != nil {
		t.Fatal(err)
	}
	m := models.ChannelMap(got)
	if w := m["agoda"].Window; w != 6*time.Second {
		t.Errorf("agoda window = %s, want the declared 6s", w)
	}
	for _, slug := range []string{"booking_com", "expedia"} {
		if w := m[slug].Window; w != models.DefaultWindow {
			t.Errorf("%s window = %s, want %s", slug, w, models.DefaultWindow)
		}
	}
	if w := (models.ChannelConfig{}).WindowLength(); w != time.Minute {
		t.Errorf("zero config's window = %s, want 60s", w)
	}
}

func TestLoadChannelsEnvOverridesFile(t *testing.T) {
	path := writeChannels(t, "channels:\n  - slug: agoda\n    burst: 20\n")
	got, err := LoadChannels(path, env(map[string]string{
		"PARITYSYNC_CHANNEL_AGODA_BURST":                       "15",
		"PARITYSYNC_CHANNEL_AGODA_RATE_PER_MINUTE":             "100",
		"PARITYSYNC_CHANNEL_BOOKING_COM_DAILY_QUOTA":           "1000",
		"PARITYSYNC_CHANNEL_BOOKING_COM_MAX_LINES_PER_REQUEST": "25",
		"PARITYSYNC_CHANNEL_EXPEDIA_SCOPE":                     "property",
	}))
	if err != nil {
		t.Fatal(err)
	}
	m := models.ChannelMap(got)
	if c := m["agoda"]; c.Burst != 15 || c.RatePerMinute != 100 {
		t.Errorf("agoda = %+v", c)
	}
	if c := m["booking_com"]; c.DailyQuota != 1000 || c.MaxLinesPerRequest != 25 {
		t.Errorf("booking_com = %+v", c)
	}
	if c := m["expedia"]; c.Scope != models.ScopeProperty {
		t.Errorf("expedia scope = %s", c.Scope)
	}
}

// Each bad value must come back naming where it was set, and all of them at once.
func TestLoadChannelsNamesBadValues(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		env   map[string]string
		wants []string
	}{
		{"env not an integer", "", map[string]string{"PARITYSYNC_CHANNEL_EXPEDIA_BURST": "ten"},
			[]string{`PARITYSYNC_CHANNEL_EXPEDIA_BURST: want an integer, got "ten"`}},
		{"env invalid scope", "", map[string]string{"PARITYSYNC_CHANNEL_AGODA_SCOPE": "global"},
			[]string{"PARITYSYNC_CHANNEL_AGODA_SCOPE: channel agoda: scope must be channel or property"}},
		{"env burst above rate", "", map[string]string{"PARITYSYNC_CHANNEL_EXPEDIA_BURST": "60"},
			[]string{"PARITYSYNC_CHANNEL_EXPEDIA_BURST: channel expedia: burst must be"}},
		{"file shares", "channels:\n  - slug: expedia\n    shares: {rates: 90}\n", nil,
			[]string{"channels file {path}: channel expedia: shares must sum to 100"}},
		{"file bad duration", "channels:\n  - slug: expedia\n    max_retry_after: five minutes\n", nil,
			[]string{"channels file {path}: channel expedia: max_retry_after: want a duration"}},
		{"file bad apply delay", "channels:\n  - slug: expedia\n    max_apply_delay: late\n", nil,
			[]string{"channels file {path}: channel expedia: max_apply_delay: want a duration"}},
		{"file negative apply delay", "channels:\n  - slug: expedia\n    max_apply_delay: -1s\n", nil,
			[]string{"channels file {path}: channel expedia: max_apply_delay must be >= 0 and <= 10m0s"}},
		{"file apply delay above 10 minutes", "channels:\n  - slug: expedia\n    max_apply_delay: 11m\n", nil,
			[]string{"channels file {path}: channel expedia: max_apply_delay must be >= 0 and <= 10m0s"}},
		{"file bad window", "channels:\n  - slug: expedia\n    window: a minute\n", nil,
			[]string{"channels file {path}: channel expedia: window: want a duration"}},
		{"file window zero", "channels:\n  - slug: expedia\n    window: 0s\n", nil,
			[]string{"channels file {path}: channel expedia: window must be > 0 and <= 1h0m0s"}},
		{"file window above an hour", "channels:\n  - slug: expedia\n    window: 2h\n", nil,
			[]string{"channels file {path}: channel expedia: window must be > 0 and <= 1h0m0s"}},
		{"file priority_reserve, no longer supported", "channels:\n  - slug: expedia\n    priority_reserve: 2\n", nil,
			[]string{"channels file {path}: channel expedia: priority_reserve: no longer supported"}},
		{"file unknown key", "channels:\n  - slug: expedia\n    rate_per_min: 10\n", nil,
			[]string{"channels file {path}:", "rate_per_min"}},
		{"file wrong type", "channels:\n  - slug: expedia\n    burst: lots\n", nil,
			[]string{"channels file {path}:", "line 3"}},
		{"file missing slug", "channels:\n  - burst: 3\n", nil,
			[]string{"channels file {path}: channel 1: slug is required"}},
		{"file bad slug", "channels:\n  - slug: Booking.com\n", nil,
			[]string{`channels file {path}: channel 1: slug "Booking.com"`}},
		{"file duplicate slug", "channels:\n  - slug: agoda\n  - slug: agoda\n", nil,
			[]string{"channels file {path}: channel 2: slug agoda listed twice"}},
		{"file and env both named", "channels:\n  - slug: agoda\n    rate_per_minute: 10\n",
			map[string]string{"PARITYSYNC_CHANNEL_AGODA_BURST": "12"},
			[]string{"channels file {path}, PARITYSYNC_CHANNEL_AGODA_BURST: channel agoda: burst must be"}},
		{"several problems at once", "", map[string]string{
			"PARITYSYNC_CHANNEL_EXPEDIA_DAILY_QUOTA": "x", "PARITYSYNC_CHANNEL_AGODA_MAX_LINES_PER_REQUEST": "y"},
			[]string{"PARITYSYNC_CHANNEL_EXPEDIA_DAILY_QUOTA", "PARITYSYNC_CHANNEL_AGODA_MAX_LINES_PER_REQUEST"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = writeChannels(t, tc.yaml)
			}
			got, err := LoadChannels(path, env(tc.env))
			if err == nil {
				t.Fatalf("no error, channels %+v", got)
			}
			for _, want := range tc.wants {
				want = strings.ReplaceAll(want, "{path}", path)
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not contain %q", err, want)
				}
			}
		})
	}
}

// TestLoadChannelsOpenTravelCodesFromTheYAML: an OpenTravel channel's
// opentravel.properties seed its codes as channex.properties seed Channex ids; a
// code past OpenTravel's lengths, or codes on a channel of another protocol, are
// refused by name.
func TestLoadChannelsOpenTravelCodesFromTheYAML(t *testing.T) {
	got, err := LoadChannels(writeChannels(t, `
channels:
  - slug: booking_xml
    protocol: opentravel
    opentravel:
      properties:
        prop_0a1b2c3d:
          hotel_code: H0042
          room_types: {DLXKING: KING1}
          rate_plans: {DLXKING/BAR_FLEX: FLEX-RACK}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := models.ChannelMap(got)["booking_xml"].OpenTravel.Properties["prop_0a1b2c3d"]
	if !ok || p.HotelCode != "H0042" || p.RoomTypes["DLXKING"] != "KING1" || p.RatePlans["DLXKING/BAR_FLEX"] != "FLEX-RACK" {
		t.Fatalf("codes read: %+v", p)
	}
	for yaml, want := range map[string]string{
		"channels:\n  - slug: booking_xml\n    protocol: opentravel\n    opentravel:\n      properties:\n        prop_0a1b2c3d: {hotel_code: H0042H0042H0042H0042}\n": "channel booking_xml: opentravel.properties.prop_0a1b2c3d.hotel_code: must be 1-16 characters",
		"channels:\n  - slug: expedia\n    opentravel:\n      properties:\n        prop_0a1b2c3d: {hotel_code: H0042}\n":                                              "channel expedia: opentravel: only for protocol opentravel",
	} {
		path := writeChannels(t, yaml)
		if _, err := LoadChannels(path, env(nil)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", yaml, err, want)
		}
	}
}

func TestLoadChannelsMissingFile(t *testing.T) {
	_, err := LoadChannels(filepath.Join(t.TempDir(), "nope.yaml"), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "channels file: ") || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("err = %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestLoadChannelsEmptyFile(t *testing.T) {
	got, err := LoadChannels(writeChannels(t, "# nothing yet\n"), nil)
	if err != nil || len(got) != 3 {
		t.Fatalf("got %v, %v", got, err)
	}
}

const channexYAML = `
channels:
  - slug: channex_eu
    protocol: channex
    base_url: https://staging.channex.io
    credentials_file: /run/secrets/channex_eu
    channex:
      properties:
        prop_0a1b2c3d:
          property_id: 716305c4-561a-4561-a187-7f5b8aeb5920
          currency: EUR
          room_types: {DLXKING: 994d1375-dbbd-4072-8724-b2ab32ce781b}
          rate_plans: {DLXKING/BAR_FLEX: bab451e7-9ab1-4cc4-aa16-107bf7bbabb2}
  - slug: booking_xml
    protocol: opentravel
    credentials_file: /run/secrets/booking_xml
`

func TestLoadChannelsProtocols(t *testing.T) {
	got, err := LoadChannels(writeChannels(t, channexYAML), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	m := models.ChannelMap(got)
	cx := m["channex_eu"]
	if cx.Protocol != models.ProtocolChannex || cx.Scope != models.ScopeProperty || !cx.ReadBack ||
		cx.BaseURL != "https://staging.channex.io" || cx.BasePath != "" || cx.CredentialsFile != "/run/secrets/channex_eu" {
		t.Errorf("channex channel = %+v", cx)
	}
	if id, ok := cx.Channex.RatePlanID("prop_0a1b2c3d", "DLXKING", "BAR_FLEX"); !ok || id != "bab451e7-9ab1-4cc4-aa16-107bf7bbabb2" {
		t.Errorf("rate plan id %q, %v", id, ok)
	}
	ota := m["booking_xml"]
	if ota.Protocol != models.ProtocolOpenTravel || ota.ReadBack {
		t.Errorf("opentravel channel: protocol %s read_back %v; want opentravel without read-back", ota.Protocol, ota.ReadBack)
	}
	if m["expedia"].Protocol != models.ProtocolParitySync || !m["expedia"].ReadBack {
		t.Errorf("default channel protocol %s read_back %v", m["expedia"].Protocol, m["expedia"].ReadBack)
	}
}

// TestDemoChannelsCoverTheSample: make demo spreads a sample batch over
// deploy/channels.demo.yaml's Channex channel, so its mapping must cover every
// code of the sample.
func TestDemoChannelsCoverTheSample(t *testing.T) {
	chs, err := LoadChannels("../deploy/channels.demo.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	m := models.ChannelMap(chs)
	if m["channex_demo"].Protocol != models.ProtocolChannex || m["ota_demo"].Protocol != models.ProtocolOpenTravel {
		t.Fatalf("demo channels: %+v", m)
	}
	v, err := models.NewValidator(chs, "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := models.NewValidator(models.DefaultChannels(), "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, mu := range sample.BatchFor(300, models.DateOf(testNow()), 1, 1, []string{"channex_demo"}) {
		generic := mu
		generic.Channel = "expedia"
		if len(plain.Validate(generic)) > 0 {
			continue // one of the sample's deliberately invalid rows
		}
		if ve := v.Validate(mu); ve != nil {
			t.Errorf("sample mutation %s refused on channex_demo: %v", mu.ID, ve)
		}
	}
}

// testNow is a fixed clock: 2026-03-10 23:30 UTC.
var testNow = func() time.Time { return time.Date(2026, 3, 10, 23, 30, 0, 0, time.UTC) }
