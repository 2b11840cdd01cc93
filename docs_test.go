package trellis_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// notInMap lists the packages docs/architecture.md need not give a line of
// their own, each with the reason.
var notInMap = map[string]string{
	"internal/gen/trellis/worker/v1":                 "generated from proto/ (make proto); the map's internal/gen line covers it",
	"internal/gen/trellis/worker/v1/workerv1connect": "generated from proto/ (make proto); the map's internal/gen line covers it",
}

// modulePackages returns the module's packages as `go list ./...` does, by
// their paths under the module root ("" for the root package): every directory
// with a non-test .go file, outside testdata, hidden and underscore directories,
// node_modules, and nested modules (a go.mod of their own).
func modulePackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (name == "testdata" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(path))
			if dir == "." {
				dir = ""
			}
			pkgs = append(pkgs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}

// The package map of docs/architecture.md gives every package of the module a
// line that begins with its path (the root package: "trellis (root)"), so that
// a newcomer finds each one there; it had left eight out as packages were
// added. A line for a directory that is not there (a package moved or removed)
// is an error too.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Package map")
	if !ok {
		t.Fatal(`docs/architecture.md has no "## Package map" section`)
	}
	_, block, ok := strings.Cut(section, "```\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/architecture.md: no code block in its package map")
	}
	named := map[string]bool{}
	first := regexp.MustCompile(`^([a-z0-9][a-z0-9_./-]*)(?:\s|$)`)
	for _, line := range strings.Split(block, "\n") {
		if strings.HasPrefix(line, "trellis (root)") {
			named[""] = true
			continue
		}
		if m := first.FindStringSubmatch(line); m != nil && !strings.Contains(m[1], ".") {
			named[m[1]] = true
		}
	}
	pkgs := modulePackages(t)
	if len(pkgs) < 20 || pkgs[0] != "" {
		t.Fatalf("found %d packages from %q: not the module's root?", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		if named[p] || notInMap[p] != "" {
			continue
		}
		if p == "" {
			t.Errorf(`docs/architecture.md's package map has no "trellis (root)" line for the root package`)
			continue
		}
		t.Errorf("docs/architecture.md's package map has no line for package %s: add one beginning with %q and what the package holds", p, p)
	}
	for p := range named {
		if st, err := os.Stat(p); p != "" && (err != nil || !st.IsDir()) {
			t.Errorf("docs/architecture.md's package map has a line for %s, which is no directory of the module (moved or removed?)", p)
		}
	}
	for p, why := range notInMap {
		if !slices.Contains(pkgs, p) {
			t.Errorf("notInMap lists %s (%s), which is no longer a package: remove it", p, why)
		}
	}
}
