package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
)

// TestDev runs the demo twice on one store (as a newcomer who tries it again would)
// and checks what it printed and how its runs ended.
func TestDev(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	for i := range 2 {
		var out, errOut bytes.Buffer
		if err := runDev(ctxT(t), []string{"--store", url, "--ui", "off"}, &out, &errOut); err != nil {
			t.Fatalf("dev #%d: %v\n%s%s", i+1, err, out.String(), errOut.String())
		}
		dbPath := strings.TrimPrefix(url, "sqlite://")
		contains(t, "dev output", out.String(),
			"pending → running",
			`running → waiting (retry backoff: step "charge" attempt 2 at `,
			"waiting → running",
			`→ failed (error: syncing inventory: step "call-warehouse" failed after 3 attempt(s)`,
			"All 4 demo runs finished in ", "3 succeeded, 1 failed",
			dbPath,
			"go run ./cmd/trellis runs list --store "+url+"\n",
			"go run ./cmd/trellis runs history order-1001-",
		)
	}
	want := map[string]trellis.Status{
		"greet": trellis.StatusSucceeded, "charge-order": trellis.StatusSucceeded,
		"sync-inventory": trellis.StatusFailed,
	}
	runs := listRuns(t, url)
	if len(runs) != 8 {
		t.Fatalf("%d runs after two devs, want 8", len(runs))
	}
	for _, r := range runs {
		if r.Status != want[r.Workflow] {
			t.Errorf("%s run %s ended %s, want %s", r.Workflow, r.WorkflowID, r.Status, want[r.Workflow])
		}
	}
	t.Run("history of the charge", func(t *testing.T) {
		t.Parallel()
		var id string
		for _, r := range runs {
			if r.Workflow == "charge-order" {
				id = r.WorkflowID
			}
		}
		res := trellisCmd(t, "runs", "history", id, "--store", url).ok(t)
		contains(t, "history", res.stdout, "reserve-stock", "fraud-check", "uuid", "receipt",
			"  attempt 1 failed at ", "payment gateway timed out", "  attempt 2 started at ", ", succeeded in ")
	})
}

func TestDevStore(t *testing.T) {
	t.Parallel()
	u, path, err := devStore("")
	if err != nil || !strings.HasPrefix(u, "sqlite:///") || !strings.HasSuffix(path, "/trellis.db") {
		t.Errorf("default store %q %q %v", u, path, err)
	}
	u, path, err = devStore("sqlite:///a b/t.db?durability=relaxed")
	if err != nil || u != "sqlite:///a%20b/t.db?durability=relaxed" || path != "/a b/t.db" {
		t.Errorf("store %q %q %v", u, path, err)
	}
	if _, _, err := devStore("sqlite://host/t.db"); err == nil {
		t.Error("bad URL accepted")
	}
}
