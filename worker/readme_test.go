package main

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/models"
)

// configRow is one row of the README's configuration table: its variables and
// their documented defaults (in brackets), in order.
type configRow struct {
	names    []string
	defaults []string
}

// readmeConfig parses the README's "Configuration" table.
func readmeConfig(t *testing.T) []configRow {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "\n## Configuration\n")
	if start < 0 {
		t.Fatal("README has no Configuration section")
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	name := regexp.MustCompile("`((?:PARITYSYNC|REDIS|TEMPORAL)_[A-Z0-9_<>]+)`")
	bracket := regexp.MustCompile(`\[((?:` + "`[^`]*`" + `(?:, )?)+)\]`)
	value := regexp.MustCompile("`([^`]*)`")
	var rows []configRow
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.SplitN(line, "|", 4)
		if len(cells) < 4 {
			continue
		}
		var r configRow
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			r.names = append(r.names, m[1])
		}
		if m := bracket.FindStringSubmatch(cells[2]); m != nil {
			for _, v := range value.FindAllStringSubmatch(m[1], -1) {
				r.defaults = append(r.defaults, v[1])
			}
		}
		rows = append(rows, r)
	}
	if len(rows) < 20 {
		t.Fatalf("read %d rows of the configuration table; the parser lost it", len(rows))
	}
	return rows
}

// loaded is everything the worker and the starter make of an environment. The
// zones are compared by name: "UTC" loaded and the built-in UTC are one zone.
type loaded struct {
	Settings config.Settings
	Zone     string
	Channels []models.ChannelConfig
}

func load(t *testing.T, getenv func(string) string) loaded {
	t.Helper()
	s, err := config.LoadSettings(getenv)
	if err != nil {
		t.Fatalf("LoadSettings: %v", err)
	}
	chs, err := config.LoadChannels(s.ChannelsFile, getenv)
	if err != nil {
		t.Fatalf("LoadChannels: %v", err)
	}
	zone := s.Zones.Default().String()
	s.Zones = models.PropertyZones{}
	return loaded{s, zone, chs}
}

// TestREADMEConfigurationDefaultsAreTheCodes sets each documented default
// explicitly and wants the same configuration as with nothing set, and wants every
// variable the worker and the starter read named in the table.
func TestREADMEConfigurationDefaultsAreTheCodes(t *testing.T) {
	rows := readmeConfig(t)
	read := map[string]bool{}
	none := load(t, func(name string) string {
		read[name] = true
		return ""
	})
	documented := map[string]bool{}
	checked := 0
	for _, r := range rows {
		for _, n := range r.names {
			documented[n] = true
		}
		if len(r.defaults) == 0 {
			continue
		}
		if len(r.defaults) != len(r.names) {
			t.Errorf("README row %v: %d defaults for %d variables", r.names, len(r.defaults), len(r.names))
			continue
		}
		for i, n := range r.names {
			env := map[string]string{n: r.defaults[i]}
			if got := load(t, func(name string) string { return env[name] }); !reflect.DeepEqual(got, none) {
				t.Errorf("README documents %s=%q as the default, but setting it changes the configuration", n, r.defaults[i])
			}
			if !read[n] {
				t.Errorf("README documents %s, which the worker and the starter never read", n)
			}
			checked++
		}
	}
	if checked < 12 {
		t.Errorf("checked %d documented defaults; the table has more", checked)
	}
	for n := range read {
		if strings.HasPrefix(n, "PARITYSYNC_CHANNEL_") && n != "PARITYSYNC_CHANNEL_URL" {
			continue // the PARITYSYNC_CHANNEL_<SLUG>_<FIELD> row
		}
		if !documented[n] {
			t.Errorf("the worker and the starter read %s; the README's configuration table does not name it", n)
		}
	}
}

// TestREADMEChannelDefaults holds the README's channel defaults to the code's: the
// built-in channels' rates and the Channex defaults.
func TestREADMEChannelDefaults(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	m := regexp.MustCompile(`Channels default to ((?:[a-z_]+ [0-9]+/min(?:, | and )?)+)\.`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("README names no channel defaults")
	}
	want := map[string]int{}
	for _, c := range models.DefaultChannels() {
		want[c.Slug] = c.RatePerMinute
	}
	for _, d := range regexp.MustCompile(`([a-z_]+) ([0-9]+)/min`).FindAllStringSubmatch(m[1], -1) {
		n, _ := strconv.Atoi(d[2])
		if want[d[1]] != n {
			t.Errorf("README: %s %d/min, the code's default is %d", d[1], n, want[d[1]])
		}
		delete(want, d[1])
	}
	if len(want) > 0 {
		t.Errorf("README does not give the defaults of %v", want)
	}

	cx := regexp.MustCompile("\\*\\*channex\\*\\*[^*]*The defaults \\(`rate_per_minute: ([0-9]+)`, `burst: ([0-9]+)`").FindStringSubmatch(text)
	if cx == nil {
		t.Fatal("README gives no Channex defaults")
	}
	c := models.NewChannexChannel("channex", models.ChannexMapping{})
	if cx[1] != strconv.Itoa(c.RatePerMinute) || cx[2] != strconv.Itoa(c.Burst) {
		t.Errorf("README: Channex defaults rate_per_minute %s burst %s; the code's are %d and %d",
			cx[1], cx[2], c.RatePerMinute, c.Burst)
	}
	if c.RatePerMinute > models.ChannexRequestsPerMinute {
		t.Errorf("the Channex default %d/min is above what validation accepts (%d)", c.RatePerMinute, models.ChannexRequestsPerMinute)
	}
}
