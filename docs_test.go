package trellis_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
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

// Every relative link of the README and of docs/*.md leads to a file of the
// repository and, with a #fragment, to a heading of that file: the README's
// sections moved into docs/, and a link left pointing at one of them would lead
// nowhere.
func TestDocLinksResolve(t *testing.T) {
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fence := regexp.MustCompile("(?s)```.*?```")
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s links to %s: no such file", f, target)
				continue
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				anchors[dest] = headingAnchors(t, dest)
			}
			if !anchors[dest][frag] {
				t.Errorf("%s links to %s: %s has no heading with the anchor #%s", f, target, dest, frag)
			}
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown
// file: lower case, spaces as hyphens, punctuation but hyphens and underscores
// dropped (a repeated heading's "-1" suffix is not needed by any link).
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inFence || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		out[a.String()] = true
	}
	return out
}

// The README is what a newcomer reads first: what Trellis is, the two commands,
// a short tour and links, in five minutes. The rest lives in docs/.
func TestReadmeStaysShort(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 150 {
		t.Errorf("README.md has %d lines, more than 150: move the detail into docs/ (getting-started, concepts, operations, benchmarks) and link to it", n)
	}
}
