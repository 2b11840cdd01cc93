package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench --workload w8 --plot writes an SVG of its points, and --plot-from
// draws it again from the JSON line, running no workload.
func TestBenchW8Plot(t *testing.T) {
	dir := t.TempDir()
	svg, again, lines := filepath.Join(dir, "w8.svg"), filepath.Join(dir, "again.svg"), filepath.Join(dir, "w8.jsonl")
	res := trellisCmd(t, "bench", "--store", "sqlite:"+filepath.Join(dir, "w8.db"), "--workload", "w8", "-n", "300", "--json", "--plot", svg).ok(t)
	if !strings.Contains(res.stdout, `"points":[{"runs":3,`) {
		t.Fatalf("w8's line: %s", res.stdout)
	}
	if err := os.WriteFile(lines, []byte(res.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	trellisCmd(t, "bench", "--plot", again, "--plot-from", lines).ok(t)
	for _, f := range []string{svg, again} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			XMLName xml.Name
		}
		if err := xml.Unmarshal(b, &doc); err != nil || doc.XMLName.Local != "svg" {
			t.Errorf("%s: root %q, %v", f, doc.XMLName.Local, err)
		}
	}
	if res := trellisCmd(t, "bench", "--plot-from", lines); res.code == 0 {
		t.Error("--plot-from without --plot succeeded")
	}
}
