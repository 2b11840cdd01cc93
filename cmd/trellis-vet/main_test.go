package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// trellis-vet through `go vet -vettool`, as a user runs it, on a module that
// uses the real trellis package (this repository, by a replace directive): the
// workflow's time.Now and map range are reported with their line and
// alternative, the step's time.Now and the plain function are not, and go vet
// fails.
func TestGoVetVettool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds trellis-vet and vets a module on the trellis package")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "trellis-vet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mod := filepath.Join(dir, "user")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod": "module example.com/user\n\ngo 1.26\n\nrequire github.com/trellis-dev/trellis v0.0.0\n\n" +
			"replace github.com/trellis-dev/trellis => " + root + "\n",
		"go.sum": string(sum),
		"wf.go": `package user

import (
	"context"
	"time"

	"github.com/trellis-dev/trellis"
)

var Order = trellis.NewWorkflow("order", func(wc *trellis.Context, in map[string]int) (int, error) {
	_ = time.Now()
	n := 0
	for _, v := range in {
		n += v
	}
	_, err := trellis.Step(wc, "stamp", func(ctx context.Context) (time.Time, error) { return time.Now(), nil })
	return n, err
})

func Plain() time.Time { return time.Now() }
`,
	}
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vet := exec.Command("go", "vet", "-vettool="+bin, "./...")
	vet.Dir = mod
	vet.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := vet.CombinedOutput()
	if err == nil {
		t.Fatalf("go vet passed; want it to fail with the workflow's reports:\n%s", out)
	}
	got := string(out)
	for _, want := range []string{
		"wf.go:11:6: time.Now in a workflow reads the wall clock, which differs on replay: use wc.Now()",
		"wf.go:13:2: ranging over a map in a workflow visits its keys in an order that differs on replay",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("go vet output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "in a workflow"); n != 2 {
		t.Errorf("go vet reported %d findings, want 2 (the step and Plain are not workflows):\n%s", n, got)
	}
}
