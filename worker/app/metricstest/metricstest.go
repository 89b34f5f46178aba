// Package metricstest holds a worker's /metrics to what the Grafana dashboard and
// the Prometheus alert rules under deploy/ query: the worker's own tests check a
// scrape of its registry with fakes behind the gauges, the end-to-end test a scrape
// of a real worker after its batches.
package metricstest

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

var metricName = regexp.MustCompile(`\b(?:paritysync|temporal)_[a-z0-9_]+`)

// deployDir is the repository's deploy/, found from this file, so that a test of
// any package reaches it whatever its working directory.
func deployDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("metricstest: cannot locate deploy/")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy")
}

// queried is every metric the Grafana dashboard and the alert rules query.
func queried(t testing.TB) []string {
	t.Helper()
	var exprs []string
	raw, err := os.ReadFile(filepath.Join(deployDir(t), "grafana", "dashboards", "paritysync.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash), "dashboard JSON")
	require.NotEmpty(t, dash.Panels)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q queries something", p.Title)
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	raw, err = os.ReadFile(filepath.Join(deployDir(t), "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules), "alert rules")
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Expr, "alert %s", r.Alert)
			exprs = append(exprs, r.Expr)
		}
	}
	var names []string
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

// ScrapedNames is every sample name in a /metrics response.
func ScrapedNames(t testing.TB, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names[line[:strings.IndexAny(line, "{ ")]] = true
	}
	return names
}

// RequireQueriedIn fails for each dashboard or alert metric the scrape lacks.
func RequireQueriedIn(t testing.TB, scraped map[string]bool) {
	t.Helper()
	queried := queried(t)
	require.NotEmpty(t, queried)
	var missing []string
	for _, n := range queried {
		// intake's series come from intake's own /metrics (compose_test.go checks
		// them against intake's definitions), not from the worker's.
		if strings.HasPrefix(n, "paritysync_intake_") {
			continue
		}
		if !scraped[n] {
			missing = append(missing, n)
		}
	}
	require.Empty(t, missing, "queried by the dashboard or the alerts but not in the scrape")
}
