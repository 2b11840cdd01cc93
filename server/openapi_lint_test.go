package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// lintDir holds the pinned Redocly CLI (package.json, package-lock.json) and
// its configuration; `npm ci` there installs it (.ci/run does).
const lintDir = "../.ci/openapi-lint"

// The OpenAPI document passes Redocly's lint (the recommended rules, 4xx
// answers as problem documents required) with no error and no warning; and
// the lint is live: a document that loses an operation's 4xx answers fails
// it. Skipped where node or the installed CLI is missing, except in CI.
func TestOpenAPILint(t *testing.T) {
	redocly := filepath.Join(lintDir, "node_modules", ".bin", "redocly")
	_, errNode := exec.LookPath("node")
	_, errCLI := os.Stat(redocly)
	if errNode != nil || errCLI != nil {
		msg := "no node, or no Redocly CLI: run `npm ci` in .ci/openapi-lint"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Parallel()
	out, ok := redoclyLint(t, redocly, OpenAPI())
	if !ok || problemLine.MatchString(out) {
		t.Fatalf("redocly lint of the OpenAPI document:\n%s", out)
	}
	broken := OpenAPI()
	get := broken["paths"].(obj)["/v1/namespaces/{ns}/runs/{id}"].(obj)["get"].(obj)
	for code := range get["responses"].(obj) {
		if strings.HasPrefix(code, "4") {
			delete(get["responses"].(obj), code)
		}
	}
	if out, ok := redoclyLint(t, redocly, broken); ok || !strings.Contains(out, "operation-4xx-response") {
		t.Fatalf("a document with an operation without 4xx answers passed the lint:\n%s", out)
	}
}

// problemLine is a line of the summary format that counts a rule's problems
// ("warning operation-4xx-response: 3").
var problemLine = regexp.MustCompile(`(?m)^(error|warning)\s+\S+: \d+`)

// redoclyLint lints doc and returns the CLI's output and whether it passed.
func redoclyLint(t *testing.T, redocly string, doc obj) (string, bool) {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, redocly, "lint", "--config", filepath.Join(lintDir, "redocly.yaml"), "--format=summary", file)
	// No telemetry and no update check: the CLI reaches for the network otherwise.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("redocly lint did not finish: %s", out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running redocly: %v", err)
	}
	return string(out), err == nil
}
