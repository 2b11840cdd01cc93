package bench

import (
	"path/filepath"
	"testing"

	"github.com/trellis-dev/trellis/internal/pgtest"
)

// ui1 seeds each store kind with bulk SQL once, then loads the four pages it
// times (every one answering 200, the first with a link to the next page); a
// second run reuses the seeded runs.
func TestUI1SeedsAndLoadsPages(t *testing.T) {
	w, ok := Find("ui1")
	if !ok {
		t.Fatal("no workload ui1")
	}
	for name, store := range map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "ui1.db") },
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	} {
		t.Run(name, func(t *testing.T) {
			url := store(t)
			for i, wantSeeded := range []bool{true, false} {
				res, err := Run(t.Context(), w, 300, Options{Store: url})
				if err != nil {
					t.Fatalf("run %d: %v", i+1, err)
				}
				if res.Settings["seeded_now"] != wantSeeded || res.Settings["runs_stored"] != 300 {
					t.Errorf("run %d: seeded_now %v, runs_stored %v; want %v, 300", i+1,
						res.Settings["seeded_now"], res.Settings["runs_stored"], wantSeeded)
				}
				if res.Settings["requests"] != 4*ui1Requests || res.P50Ms <= 0 {
					t.Errorf("run %d: %v requests, p50 %v ms", i+1, res.Settings["requests"], res.P50Ms)
				}
			}
		})
	}
}
