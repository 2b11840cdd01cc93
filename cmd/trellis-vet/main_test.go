package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// trellis-vet through `go vet -vettool`, as a user runs it, on a package that
// uses the real trellis package (testdata/user, in this module: go vet names
// it by its path; a ./... skips testdata): the workflow's time.Now and map
// range are reported with their line and alternative, the step's time.Now
// and the plain function are not, and go vet fails. (A module of its own
// with a replace directive to this one needed, offline, go.mod files that no
// build of trellis reads, and failed on a new machine's module cache.)
func TestGoVetVettool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds trellis-vet and vets a package on the trellis package")
	}
	bin := filepath.Join(t.TempDir(), "trellis-vet")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	vet := exec.Command("go", "vet", "-vettool="+bin, "./testdata/user")
	vet.Env = append(os.Environ(), "GOPROXY=off")
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
