package workflows

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestImportsOnlyTheContract holds STYLE.md's rule that workflow code imports only
// the contract: no package of this module but models, and none of pgx, go-redis,
// Prometheus or fx. net/http is linked by the Temporal SDK itself (gRPC); what
// workflows links beyond the SDK must not add it.
func TestImportsOnlyTheContract(t *testing.T) {
	deps := goList(t, "-deps", ".")
	var sdk []string
	for _, p := range goList(t, "-f", "{{join .Imports \"\\n\"}}", ".") {
		if strings.HasPrefix(p, "go.temporal.io/") {
			sdk = append(sdk, p)
		}
	}
	linkedBySDK := map[string]bool{}
	for _, p := range goList(t, append([]string{"-deps"}, sdk...)...) {
		linkedBySDK[p] = true
	}
	forbidden := []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "github.com/prometheus/",
		"go.uber.org/fx", "go.uber.org/dig"}
	const module = "github.com/paritysync/paritysync/"
	for _, p := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("workflows links %s", p)
			}
		}
		if strings.HasPrefix(p, module) && p != module+"models" && p != module+"workflows" {
			t.Errorf("workflows links %s: workflow code imports only the contract (models)", p)
		}
		if (p == "net/http" || strings.HasPrefix(p, "net/http/")) && !linkedBySDK[p] {
			t.Errorf("workflows links %s beyond what the Temporal SDK links", p)
		}
	}
}

// goList runs go list with args in this package's directory.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if p, err := exec.LookPath("go"); err == nil {
		goTool = p
	}
	out, err := exec.Command(goTool, append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}
