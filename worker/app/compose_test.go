package app

import (
	"bufio"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/testenv"
	"github.com/paritysync/paritysync/models"
)

// No container engine runs in CI, so these tests hold docker-compose.yml, the
// Temporal dynamic config and the Dockerfile to what the README promises and to what
// the worker actually reads.

// root is the repository, seen from this package.
const root = "../.."

const (
	composePath       = root + "/docker-compose.yml"
	dockerfilePath    = root + "/Dockerfile"
	setupServiceImage = "temporalio/admin-tools"
)

// composeFile is the part of the Compose specification these tests look at.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Secrets  map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
		Target     string `yaml:"target"`
	} `yaml:"build"`
	// Environment and DependsOn come as a list or a map; see envOf and dependsOnOf.
	Environment yaml.Node `yaml:"environment"`
	DependsOn   yaml.Node `yaml:"depends_on"`
	Ports       []string  `yaml:"ports"`
	Volumes     []string  `yaml:"volumes"`
	Entrypoint  yaml.Node `yaml:"entrypoint"`
	Command     yaml.Node `yaml:"command"`
	Secrets     []string  `yaml:"secrets"`
	Restart     string    `yaml:"restart"`
	Healthcheck struct {
		Test yaml.Node `yaml:"test"`
	} `yaml:"healthcheck"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatalf("read compose file: %v", err)
	}
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parse %s: %v", composePath, err)
	}
	return f
}

func service(t *testing.T, f composeFile, name string) composeService {
	t.Helper()
	s, ok := f.Services[name]
	if !ok {
		t.Fatalf("compose has no service %q; has %v", name, serviceNames(f))
	}
	return s
}

func serviceNames(f composeFile) []string {
	names := make([]string, 0, len(f.Services))
	for n := range f.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// setupService is the one-shot service that registers the search attributes: the
// one running the admin tools.
func setupService(t *testing.T, f composeFile) (string, composeService) {
	t.Helper()
	for _, name := range serviceNames(f) {
		if s := f.Services[name]; strings.HasPrefix(s.Image, setupServiceImage) {
			return name, s
		}
	}
	t.Fatalf("compose has no %s service to register the search attributes", setupServiceImage)
	return "", composeService{}
}

// interpolation matches ${NAME}, ${NAME:-default} and ${NAME-default}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// interpolate resolves a Compose value as on a host that sets none of the variables,
// so the test does not depend on the environment it runs in.
func interpolate(v string) string {
	v = interpolation.ReplaceAllString(v, "$2")
	return strings.ReplaceAll(v, "$$", "$")
}

// envOf reads environment in either form Compose accepts: a map or a NAME=value list.
func envOf(t *testing.T, s composeService) map[string]string {
	t.Helper()
	env := map[string]string{}
	switch s.Environment.Kind {
	case 0:
	case yaml.MappingNode:
		var m map[string]string
		if err := s.Environment.Decode(&m); err != nil {
			t.Fatalf("environment: %v", err)
		}
		for k, v := range m {
			env[k] = interpolate(v)
		}
	case yaml.SequenceNode:
		var l []string
		if err := s.Environment.Decode(&l); err != nil {
			t.Fatalf("environment: %v", err)
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = interpolate(v)
		}
	default:
		t.Fatalf("environment: want a map or a list, line %d", s.Environment.Line)
	}
	return env
}

// dependsOnOf returns each dependency and its condition ("" in the short list form).
func dependsOnOf(t *testing.T, s composeService) map[string]string {
	t.Helper()
	deps := map[string]string{}
	switch s.DependsOn.Kind {
	case 0:
	case yaml.SequenceNode:
		var l []string
		if err := s.DependsOn.Decode(&l); err != nil {
			t.Fatalf("depends_on: %v", err)
		}
		for _, d := range l {
			deps[d] = ""
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := s.DependsOn.Decode(&m); err != nil {
			t.Fatalf("depends_on: %v", err)
		}
		for d, c := range m {
			deps[d] = c.Condition
		}
	default:
		t.Fatalf("depends_on: want a map or a list, line %d", s.DependsOn.Line)
	}
	return deps
}

// textOf joins a string-or-list field such as command into one string.
func textOf(t *testing.T, n yaml.Node) string {
	t.Helper()
	switch n.Kind {
	case 0:
		return ""
	case yaml.ScalarNode:
		return n.Value
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			t.Fatalf("line %d: %v", n.Line, err)
		}
		return strings.Join(l, " ")
	}
	t.Fatalf("line %d: want a string or a list", n.Line)
	return ""
}

// publishes reports whether s maps host port published to container port target,
// in the short syntax ("8233:8080", optionally with a host IP or /tcp).
func publishes(s composeService, published, target string) bool {
	for _, p := range s.Ports {
		p = strings.TrimSuffix(p, "/tcp")
		parts := strings.Split(p, ":")
		if len(parts) < 2 {
			continue
		}
		if parts[len(parts)-2] == published && parts[len(parts)-1] == target {
			return true
		}
	}
	return false
}

func TestComposeServices(t *testing.T) {
	f := loadCompose(t)
	images := map[string]string{
		"postgresql":  "postgres:16",
		"temporal":    "temporalio/auto-setup:",
		"temporal-ui": "temporalio/ui:",
		"redis":       "redis:7",
	}
	for name, prefix := range images {
		if s := service(t, f, name); !strings.HasPrefix(s.Image, prefix) {
			t.Errorf("service %s: image %q, want %s…", name, s.Image, prefix)
		}
	}
	for _, name := range []string{"otasim", "worker", "intake"} {
		s := service(t, f, name)
		if s.Build.Context != "." || (s.Build.Dockerfile != "" && s.Build.Dockerfile != "Dockerfile") {
			t.Errorf("service %s: build context %q dockerfile %q, want the repository's Dockerfile",
				name, s.Build.Context, s.Build.Dockerfile)
		}
		if s.Build.Target != name {
			t.Errorf("service %s: build target %q, want %q", name, s.Build.Target, name)
		}
	}
	setupService(t, f)

	// Temporal's history must survive `docker compose down` (without -v).
	pg := service(t, f, "postgresql")
	persisted := false
	for _, v := range pg.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		if _, named := f.Volumes[src]; named && strings.HasPrefix(dst, "/var/lib/postgresql/data") {
			persisted = true
		}
	}
	if !persisted {
		t.Errorf("postgresql: volumes %v, want a named volume on /var/lib/postgresql/data", pg.Volumes)
	}
	if env := envOf(t, service(t, f, "temporal")); env["DB"] != "postgres12" || env["POSTGRES_SEEDS"] != "postgresql" {
		t.Errorf("temporal: DB=%q POSTGRES_SEEDS=%q, want postgres12 on the postgresql service",
			env["DB"], env["POSTGRES_SEEDS"])
	}
	if env := envOf(t, service(t, f, "temporal-ui")); env["TEMPORAL_ADDRESS"] != "temporal:7233" {
		t.Errorf("temporal-ui: TEMPORAL_ADDRESS=%q, want temporal:7233", env["TEMPORAL_ADDRESS"])
	}
}

// published are the only services with ports on the host: the UI, intake and
// Grafana. Redis has no password and Temporal no auth; everything else is reached
// inside the compose network (deploy/compose.host-access.yml publishes more, on
// 127.0.0.1, for a starter on the host).
var published = map[string]string{"temporal-ui": "8233:8080", "intake": "8080:8080", "grafana": "3000:3000"}

func TestComposePorts(t *testing.T) {
	f := loadCompose(t)
	for _, name := range serviceNames(f) {
		s := f.Services[name]
		want, ok := published[name]
		if !ok {
			if len(s.Ports) > 0 {
				t.Errorf("service %s publishes %v: only %v are published", name, s.Ports, published)
			}
			continue
		}
		pub, target, _ := strings.Cut(want, ":")
		if len(s.Ports) != 1 || !publishes(s, pub, target) {
			t.Errorf("service %s: ports %v, want only %s", name, s.Ports, want)
		}
		for _, p := range s.Ports {
			if host := hostIP(p); host != "127.0.0.1" {
				t.Errorf("service %s: port %q is published on %q by default, want 127.0.0.1", name, p, host)
			}
		}
	}

	// A published port is useless unless the process listens on it, on every
	// interface (the defaults of both commands listen on 127.0.0.1 or differ).
	listens := []struct{ service, env, port string }{
		{"otasim", "OTASIM_ADDR", "8090"},
		{"worker", "PARITYSYNC_METRICS_ADDR", "9464"},
		{"intake", "PARITYSYNC_INTAKE_ADDR", "8080"},
	}
	for _, l := range listens {
		addr := envOf(t, service(t, f, l.service))[l.env]
		host, port, err := net.SplitHostPort(addr)
		if err != nil || port != l.port || (host != "" && host != "0.0.0.0") {
			t.Errorf("service %s: %s=%q, want :%s", l.service, l.env, addr, l.port)
		}
	}
}

// hostIP is the host address a short-syntax port publishes on, as Compose resolves
// it on a host that sets no variable ("" for every interface).
func hostIP(port string) string {
	parts := strings.Split(interpolate(strings.TrimSuffix(port, "/tcp")), ":")
	if len(parts) < 3 {
		return ""
	}
	return strings.Join(parts[:len(parts)-2], ":")
}

func TestComposeHostAccessOverrideStaysOnLocalhost(t *testing.T) {
	raw, err := os.ReadFile(root + "/deploy/compose.host-access.yml")
	if err != nil {
		t.Fatal(err)
	}
	var over composeFile
	if err := yaml.Unmarshal(raw, &over); err != nil {
		t.Fatalf("parse compose.host-access.yml: %v", err)
	}
	base := loadCompose(t)
	for _, name := range []string{"temporal", "postgresql", "redis"} {
		if len(over.Services[name].Ports) == 0 {
			t.Errorf("compose.host-access.yml: %s not published; a starter on the host needs it", name)
		}
	}
	for name, s := range over.Services {
		if _, ok := base.Services[name]; !ok {
			t.Errorf("compose.host-access.yml: service %s is not in docker-compose.yml", name)
		}
		for _, p := range s.Ports {
			if hostIP(p) != "127.0.0.1" {
				t.Errorf("compose.host-access.yml: %s publishes %q, want 127.0.0.1 only", name, p)
			}
		}
	}
}

// imageTag matches a full release tag: 16.6, 7.4.1, v3.5.0, 1.29.7.
var imageTag = regexp.MustCompile(`^v?[0-9]+\.[0-9]+(\.[0-9]+)?$`)

// majorMinorOnly are images that publish no patch-level tag for the version used.
var majorMinorOnly = map[string]bool{"temporalio/admin-tools": true}

func TestComposeImagesArePinned(t *testing.T) {
	f := loadCompose(t)
	for _, name := range serviceNames(f) {
		s := f.Services[name]
		if s.Image == "" {
			continue // built from the Dockerfile
		}
		repo, tag, ok := strings.Cut(interpolate(s.Image), ":")
		if !ok || !imageTag.MatchString(tag) {
			t.Errorf("service %s: image %q, want a release tag (no latest, no floating major)", name, s.Image)
			continue
		}
		if strings.Count(tag, ".") < 2 && !majorMinorOnly[repo] && !strings.HasPrefix(repo, "postgres") {
			t.Errorf("service %s: image %q floats over patch releases; pin major.minor.patch", name, s.Image)
		}
		if strings.HasPrefix(repo, "postgres") && strings.Count(tag, ".") < 1 {
			t.Errorf("service %s: image %q floats over minor releases", name, s.Image)
		}
	}
}

// TestComposeHealthchecks: every long-running service has a healthcheck with a
// tool its image has. Our images are distroless (no shell, no wget): they run the
// probe binary the Dockerfile copies in, against the port the service listens on.
func TestComposeHealthchecks(t *testing.T) {
	f := loadCompose(t)
	oneShot, _ := setupService(t, f)
	ours := map[string]string{ // service: the URL its probe asks
		"worker": "http://127.0.0.1:9464/healthz",
		"intake": "http://127.0.0.1:8080/readyz",
		"otasim": "http://127.0.0.1:8090/stats",
	}
	for _, name := range serviceNames(f) {
		s := f.Services[name]
		if name == oneShot {
			continue // exits once the search attributes exist
		}
		test := textOf(t, s.Healthcheck.Test)
		if test == "" {
			t.Errorf("service %s has no healthcheck", name)
			continue
		}
		if url, ok := ours[name]; ok {
			if test != "CMD /usr/local/bin/probe "+url {
				t.Errorf("service %s: healthcheck %q, want the probe binary on %s", name, test, url)
			}
			continue
		}
		if strings.HasPrefix(test, "CMD-SHELL") && s.Build.Context != "" {
			t.Errorf("service %s: a shell healthcheck on a distroless image", name)
		}
	}
	df := readDockerfile(t)
	n := 0
	for name := range ours {
		if slices.Contains(df.lines(name), "COPY --from="+df.build+" /out/probe /usr/local/bin/probe") {
			n++
		}
	}
	if n != len(ours) {
		t.Errorf("Dockerfile copies the probe into %d images, want %d (worker, intake, otasim)", n, len(ours))
	}
	if !slices.ContainsFunc(df.stages[df.build], func(l string) bool { return strings.Contains(l, "./deploy/probe") }) {
		t.Error("Dockerfile does not build ./deploy/probe")
	}
	// Dependencies wait for health where a healthcheck exists.
	if dependsOnOf(t, service(t, f, "worker"))["otasim"] != "service_healthy" {
		t.Error("worker: depends on otasim without waiting for it to be healthy")
	}
	if dependsOnOf(t, service(t, f, "grafana"))["prometheus"] != "service_healthy" {
		t.Error("grafana: depends on prometheus without waiting for it to be healthy")
	}
}

func TestComposeWorkerEnvironment(t *testing.T) {
	f := loadCompose(t)
	w := service(t, f, "worker")
	env := envOf(t, w)

	s, err := config.LoadSettings(func(name string) string { return env[name] })
	if err != nil {
		t.Fatalf("worker environment rejected by LoadSettings: %v", err)
	}
	redisURL, err := url.Parse(s.RedisURL)
	if err != nil || redisURL.Scheme != "redis" || redisURL.Host != "redis:6379" {
		t.Errorf("REDIS_URL=%q, want redis://redis:6379/…", s.RedisURL)
	}
	dbURL, err := url.Parse(s.DatabaseURL)
	if err != nil || dbURL.Scheme != "postgres" || dbURL.Host != "postgresql:5432" || dbURL.Path != "/paritysync" {
		t.Errorf("PARITYSYNC_DATABASE_URL=%q, want postgres://…@postgresql:5432/paritysync", s.DatabaseURL)
	}
	if s.TemporalAddress != "temporal:7233" {
		t.Errorf("TEMPORAL_ADDRESS=%q, want temporal:7233", s.TemporalAddress)
	}
	channelURL, err := url.Parse(s.ChannelURL)
	if err != nil || channelURL.Host != "otasim:8090" {
		t.Errorf("PARITYSYNC_CHANNEL_URL=%q, want http://otasim:8090", s.ChannelURL)
	}
	if _, err := config.LoadChannels(s.ChannelsFile, func(name string) string { return env[name] }); err != nil {
		t.Errorf("worker environment rejected by LoadChannels: %v", err)
	}

	// The simulator must accept the worker's credential, or every push is a 401.
	sim := envOf(t, service(t, f, "otasim"))
	if s.Token == "" || !slices.Contains(strings.Split(sim["OTASIM_STATIC_TOKENS"], ","), s.Token) {
		t.Errorf("worker PARITYSYNC_TOKEN=%q is not among otasim OTASIM_STATIC_TOKENS=%q",
			s.Token, sim["OTASIM_STATIC_TOKENS"])
	}

	deps := dependsOnOf(t, w)
	for _, d := range []string{"postgresql", "redis", "temporal", "otasim"} {
		if _, ok := deps[d]; !ok {
			t.Errorf("worker: depends_on %v, want %s", deps, d)
		}
	}
	// Workflows set the search attributes, so the worker starts after they exist.
	setup, _ := setupService(t, f)
	if deps[setup] != "service_completed_successfully" {
		t.Errorf("worker: depends_on %s with condition %q, want service_completed_successfully", setup, deps[setup])
	}
}

// TestComposeWorkerEnvironmentIsRead catches a misspelt or retired variable in the
// compose file, which the worker would silently ignore in favour of its default.
func TestComposeWorkerEnvironmentIsRead(t *testing.T) {
	f := loadCompose(t)
	env := envOf(t, service(t, f, "worker"))

	read := map[string]bool{}
	getenv := func(name string) string {
		read[name] = true
		return env[name]
	}
	// loadConfig is the worker's own path through config.LoadSettings and
	// config.LoadChannels.
	if _, err := loadConfig(getenv); err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if !read["REDIS_URL"] || !read["PARITYSYNC_TOKEN"] || !read["PARITYSYNC_DATABASE_URL"] {
		t.Fatalf("getenv recorded %d names, missing REDIS_URL or PARITYSYNC_TOKEN: the recorder is not wired", len(read))
	}
	for name := range env {
		ours := strings.HasPrefix(name, "PARITYSYNC_") || strings.HasPrefix(name, "REDIS_") ||
			strings.HasPrefix(name, "TEMPORAL_")
		if ours && !read[name] {
			t.Errorf("worker environment sets %s, which the worker never reads", name)
		}
	}
}

// TestComposeIntake holds the intake service to what intake reads: every
// paritysync, Redis and Temporal variable it sets is read by intake's own loaders
// (config.LoadSettings, LoadChannels, LoadIntakeSettings) and accepted by them; it
// reaches the same PostgreSQL, Redis and Temporal as the worker; its API keys file
// is a Compose secret mounted where PARITYSYNC_API_KEYS_FILE says, from a file
// that exists; and it starts after the worker, which applies the migrations.
func TestComposeIntake(t *testing.T) {
	f := loadCompose(t)
	s := service(t, f, "intake")
	env := envOf(t, s)
	read := map[string]bool{}
	getenv := func(name string) string {
		read[name] = true
		return env[name]
	}
	set, err := config.LoadSettings(getenv)
	if err != nil {
		t.Fatalf("intake environment rejected by LoadSettings: %v", err)
	}
	if _, err := config.LoadChannels(set.ChannelsFile, getenv); err != nil {
		t.Fatalf("intake environment rejected by LoadChannels: %v", err)
	}
	is, err := config.LoadIntakeSettings(getenv)
	if err != nil {
		t.Fatalf("intake environment rejected by LoadIntakeSettings: %v", err)
	}
	for name := range env {
		ours := strings.HasPrefix(name, "PARITYSYNC_") || strings.HasPrefix(name, "REDIS_") ||
			strings.HasPrefix(name, "TEMPORAL_")
		if ours && !read[name] {
			t.Errorf("intake environment sets %s, which intake never reads", name)
		}
	}
	worker := envOf(t, service(t, f, "worker"))
	for _, name := range []string{"PARITYSYNC_DATABASE_URL", "REDIS_URL", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"} {
		if env[name] != worker[name] {
			t.Errorf("intake %s=%q, worker has %q: they must share it", name, env[name], worker[name])
		}
	}

	mounted := false
	for _, name := range s.Secrets {
		if "/run/secrets/"+name != is.APIKeysFile {
			continue
		}
		mounted = true
		sec, ok := f.Secrets[name]
		if !ok {
			t.Errorf("intake: secret %s is not defined at the top level", name)
			continue
		}
		file := interpolate(sec.File)
		if _, err := os.Stat(path.Join(root, file)); err != nil {
			t.Errorf("secret %s: file %q: %v", name, file, err)
		}
	}
	if !mounted {
		t.Errorf("intake: PARITYSYNC_API_KEYS_FILE=%q is not a mounted secret (secrets %v)", is.APIKeysFile, s.Secrets)
	}

	deps := dependsOnOf(t, s)
	for _, d := range []string{"postgresql", "redis", "temporal", "worker"} {
		if _, ok := deps[d]; !ok {
			t.Errorf("intake: depends_on %v, want %s", deps, d)
		}
	}
}

// searchAttributeCreate matches one registration in the setup service's script.
var searchAttributeCreate = regexp.MustCompile(`search-attribute create\s+--name\s+(\w+)\s+--type\s+(\w+)`)

func TestComposeSearchAttributes(t *testing.T) {
	f := loadCompose(t)
	name, s := setupService(t, f)
	script := textOf(t, s.Entrypoint) + " " + textOf(t, s.Command)

	got := map[string]string{}
	for _, m := range searchAttributeCreate.FindAllStringSubmatch(script, -1) {
		got[m[1]] = m[2]
	}
	// The types the workflows use: keyword keys for Channel and BatchID, an int64
	// key (CLI type Int) for Priority.
	want := map[string]string{
		models.SearchAttrChannel:  "Keyword",
		models.SearchAttrBatchID:  "Keyword",
		models.SearchAttrPriority: "Int",
	}
	for attr, typ := range want {
		if got[attr] != typ {
			t.Errorf("%s: registers %s as %q, want %s", name, attr, got[attr], typ)
		}
	}
	if env := envOf(t, s); env["TEMPORAL_ADDRESS"] != "temporal:7233" {
		t.Errorf("%s: TEMPORAL_ADDRESS=%q, want temporal:7233", name, env["TEMPORAL_ADDRESS"])
	}
	if _, ok := dependsOnOf(t, s)["temporal"]; !ok {
		t.Errorf("%s: does not depend on temporal", name)
	}
}

// dynamicValue is one constrained value of a Temporal dynamic config key.
type dynamicValue struct {
	Value       any            `yaml:"value"`
	Constraints map[string]any `yaml:"constraints"`
}

func TestComposeTemporalDynamicConfig(t *testing.T) {
	f := loadCompose(t)
	temporal := service(t, f, "temporal")
	inContainer := envOf(t, temporal)["DYNAMIC_CONFIG_FILE_PATH"]
	if inContainer == "" {
		t.Fatal("temporal: DYNAMIC_CONFIG_FILE_PATH not set")
	}
	if !path.IsAbs(inContainer) {
		inContainer = path.Join("/etc/temporal", inContainer) // the server's working directory
	}
	var onHost string
	for _, v := range temporal.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == inContainer {
			onHost = parts[0]
		}
	}
	if onHost != "./deploy/temporal-dynamic-config.yaml" {
		t.Fatalf("temporal: %s is mounted from %q, want ./deploy/temporal-dynamic-config.yaml", inContainer, onHost)
	}

	raw, err := os.ReadFile(path.Join(root, onHost))
	if err != nil {
		t.Fatalf("read dynamic config: %v", err)
	}
	var dc map[string][]dynamicValue
	if err := yaml.Unmarshal(raw, &dc); err != nil {
		t.Fatalf("parse dynamic config: %v", err)
	}
	// Without constraints the value holds for every namespace and task queue.
	want := map[string]any{
		"matching.useNewMatcher":               true,
		"matching.numTaskqueueReadPartitions":  1,
		"matching.numTaskqueueWritePartitions": 1,
	}
	for key, v := range want {
		vals := dc[key]
		if len(vals) != 1 || vals[0].Value != v || len(vals[0].Constraints) != 0 {
			t.Errorf("dynamic config %s = %+v, want one unconstrained value %v", key, vals, v)
		}
	}
}

// dockerfile is the Dockerfile split into its stages, continuation lines joined,
// comments and blank lines left out.
type dockerfile struct {
	stages map[string][]string // by stage name, lower case
	base   map[string]string   // the stage a stage is built FROM, when it is one
	build  string              // the golang stage
}

// lines are what stage holds, its base stages' lines first: what its image has.
func (d dockerfile) lines(stage string) []string {
	var out []string
	for s, seen := stage, map[string]bool{}; s != "" && !seen[s]; s = d.base[s] {
		seen[s] = true
		out = append(append([]string(nil), d.stages[s]...), out...)
	}
	return out
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	raw, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatalf("read Dockerfile: %v", err)
	}

	// Join continuation lines, then split the file into its stages.
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	d := dockerfile{stages: map[string][]string{}, base: map[string]string{}}
	var stage string
	fromLine := regexp.MustCompile(`(?i)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?$`)
	for _, line := range lines {
		if m := fromLine.FindStringSubmatch(line); m != nil {
			stage = strings.ToLower(m[2])
			if _, ok := d.stages[strings.ToLower(m[1])]; ok {
				d.base[stage] = strings.ToLower(m[1])
			}
			d.stages[stage] = nil // a stage with no lines of its own is a stage still
			if strings.HasPrefix(m[1], "golang:") || strings.HasPrefix(m[1], "golang@") {
				d.build = stage
			}
			continue
		}
		d.stages[stage] = append(d.stages[stage], line)
	}
	if d.build == "" {
		t.Fatal("Dockerfile: no golang build stage")
	}
	return d
}

func TestComposeDockerfileBuildsWorkerAndSimulator(t *testing.T) {
	df := readDockerfile(t)
	stages, buildStage := df.stages, df.build

	var build string
	for _, line := range stages[buildStage] {
		if strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build") {
			build = line
		}
	}
	for _, pkg := range []string{"./worker", "./otasim", "./intake"} {
		if !slices.Contains(strings.Fields(build), pkg) {
			t.Errorf("Dockerfile: go build %q does not build %s", build, pkg)
		}
	}

	// Each target compose builds copies its binary and runs it.
	for _, target := range []string{"worker", "otasim", "intake"} {
		body, ok := stages[target]
		if !ok {
			t.Errorf("Dockerfile: no stage %q for compose's build target", target)
			continue
		}
		var copies, runs bool
		for _, line := range body {
			copies = copies || (strings.HasPrefix(line, "COPY --from="+buildStage) && strings.Contains(line, "/"+target+" "))
			runs = runs || (strings.HasPrefix(line, "ENTRYPOINT") && strings.Contains(line, "/"+target+`"`))
		}
		if !copies || !runs {
			t.Errorf("Dockerfile stage %s: copies its binary %v, runs it %v; want both", target, copies, runs)
		}
	}
}

// Prometheus must scrape the worker where it listens and load the alert rules;
// Grafana must get the dashboard and a data source pointing at Prometheus.
func TestComposeObservability(t *testing.T) {
	f := loadCompose(t)
	prom := service(t, f, "prometheus")
	if !strings.HasPrefix(prom.Image, "prom/prometheus:") {
		t.Errorf("prometheus: image %q, want prom/prometheus", prom.Image)
	}
	mounts := map[string]string{}
	for _, name := range []string{"prometheus", "grafana"} {
		for _, v := range service(t, f, name).Volumes {
			src, rest, _ := strings.Cut(v, ":")
			dst, _, _ := strings.Cut(rest, ":")
			mounts[dst] = src
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(path.Join(root, src)); err != nil {
					t.Errorf("%s: mounts %s, which does not exist: %v", name, src, err)
				}
			}
		}
	}
	// The folder is mounted, so the config's relative paths resolve the same in the
	// container and on the host.
	cfgDir := mounts["/etc/prometheus"]
	if cfgDir == "" {
		t.Fatal("prometheus: no config folder mounted at /etc/prometheus")
	}
	cfgPath := path.Join(cfgDir, "prometheus.yml")
	raw, err := os.ReadFile(path.Join(root, cfgPath))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", cfgPath, err)
	}
	_, metricsPort, _ := net.SplitHostPort(envOf(t, service(t, f, "worker"))["PARITYSYNC_METRICS_ADDR"])
	_, intakePort, _ := net.SplitHostPort(envOf(t, service(t, f, "intake"))["PARITYSYNC_INTAKE_ADDR"])
	for _, target := range []string{"worker:" + metricsPort, "intake:" + intakePort} {
		scraped := false
		for _, sc := range cfg.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				scraped = scraped || slices.Contains(st.Targets, target)
			}
		}
		if !scraped {
			t.Errorf("%s: no scrape target %s", cfgPath, target)
		}
	}
	for _, rf := range cfg.RuleFiles {
		// Relative to the config file, as Prometheus resolves them.
		if path.IsAbs(rf) {
			t.Errorf("%s: rule file %s is a container path; name it relative to the config", cfgPath, rf)
		} else if _, err := os.Stat(path.Join(root, cfgDir, rf)); err != nil {
			t.Errorf("%s: rule file %s: %v", cfgPath, rf, err)
		}
	}

	graf := service(t, f, "grafana")
	if !strings.HasPrefix(graf.Image, "grafana/grafana:") || !publishes(graf, "3000", "3000") {
		t.Errorf("grafana: image %q ports %v, want grafana/grafana on 3000", graf.Image, graf.Ports)
	}
	if mounts["/etc/grafana/provisioning"] == "" || mounts["/var/lib/grafana/dashboards"] == "" {
		t.Fatalf("grafana: provisioning and dashboards must be mounted, got %v", graf.Volumes)
	}
	raw, err = os.ReadFile(path.Join(root, mounts["/etc/grafana/provisioning"], "dashboards", "paritysync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "path: /var/lib/grafana/dashboards") {
		t.Errorf("grafana dashboard provider does not read /var/lib/grafana/dashboards")
	}
	raw, err = os.ReadFile(path.Join(root, mounts["/etc/grafana/provisioning"], "datasources", "prometheus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "url: http://prometheus:9090") || !strings.Contains(string(raw), "uid: prometheus") {
		t.Errorf("grafana data source must be uid prometheus at http://prometheus:9090, as the dashboard expects")
	}
}

// TestComposePromtool checks the Prometheus files with Prometheus's own tool, as a
// user reads them: the config (and the rule files it names, relative to it), the
// rules, and the alerts' unit tests. make test installs promtool when it is missing.
func TestComposePromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool not installed (make test installs it: apt-get install prometheus)", err)
	}
	for _, args := range [][]string{
		{"check", "config", root + "/deploy/prometheus/prometheus.yml"},
		{"check", "rules", root + "/deploy/prometheus/alerts.yml"},
		{"test", "rules", root + "/deploy/prometheus/alerts_test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// metricLabels reads the paritysync metrics the code defines and their labels from
// the sources that define them (Desc and Opts literals followed by their label list).
func metricLabels(t *testing.T) map[string][]string {
	t.Helper()
	defined := regexp.MustCompile(`"(paritysync_[a-z0-9_]+)"`)
	labelList := regexp.MustCompile(`\[\]string\{([^}]*)\}|, nil, nil\)`)
	out := map[string][]string{}
	for _, file := range []string{"metrics.go", "lag.go", root + "/activities/metrics.go", root + "/intake/observe.go"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		src := string(raw)
		for _, m := range defined.FindAllStringSubmatchIndex(src, -1) {
			name := src[m[2]:m[3]]
			rest := src[m[1]:]
			l := labelList.FindStringSubmatchIndex(rest)
			if l == nil {
				t.Fatalf("%s: no label list after %s", file, name)
			}
			var labels []string
			if l[2] >= 0 {
				for _, q := range strings.Split(rest[l[2]:l[3]], ",") {
					if q = strings.Trim(strings.TrimSpace(q), `"`); q != "" {
						labels = append(labels, q)
					}
				}
			}
			out[name] = labels
		}
	}
	return out
}

// TestComposeDashboardUsesRealLabels holds every dashboard query to the metrics the
// code exports: each paritysync series exists, and every label a query groups by,
// filters on or shows in its legend is one the metric has.
func TestComposeDashboardUsesRealLabels(t *testing.T) {
	metrics := metricLabels(t)
	if len(metrics["paritysync_window_slots"]) == 0 || len(metrics["paritysync_intake_requests_total"]) != 2 {
		t.Fatalf("metric definitions not read: %v", metrics)
	}
	raw, err := os.ReadFile(root + "/deploy/grafana/dashboards/paritysync.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`paritysync_[a-z0-9_]+`)
	grouped := regexp.MustCompile(`by \(([^)]*)\)`)
	matcher := regexp.MustCompile(`([a-z_]+)\s*(?:=|!=|=~|!~)\s*"`)
	legend := regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
	intake := false
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			names := series.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				continue // the Temporal SDK's series
			}
			allowed := map[string]bool{"le": true, "instance": true, "job": true}
			for _, n := range names {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if _, ok := metrics[base]; !ok {
						base = strings.TrimSuffix(base, suf)
					}
				}
				labels, ok := metrics[base]
				if !ok {
					t.Errorf("panel %q: %s is not a metric the code exports", p.Title, n)
				}
				for _, l := range labels {
					allowed[l] = true
				}
				intake = intake || strings.HasPrefix(base, "paritysync_intake_")
			}
			var used []string
			for _, m := range grouped.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					used = append(used, strings.TrimSpace(l))
				}
			}
			for _, m := range matcher.FindAllStringSubmatch(tg.Expr, -1) {
				used = append(used, m[1])
			}
			for _, m := range legend.FindAllStringSubmatch(tg.Legend, -1) {
				used = append(used, m[1])
			}
			for _, l := range used {
				if !allowed[l] {
					t.Errorf("panel %q: label %q is not on %v", p.Title, l, names)
				}
			}
		}
	}
	if !intake {
		t.Error("the dashboard has no intake panel")
	}
}
