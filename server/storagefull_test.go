package server

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// A SQLite store whose volume has no room for its disk reserve refuses new
// runs (storesqlite.Config.DiskReserve): through the server a start, a batch
// of starts and a reset are answered 507 storage_full, with a detail that
// says why and what to do, and write nothing; the Go client of the server
// gets ErrStorageFull. Reads go on. (The reserve at work on a volume that
// fills up: TestFullDiskReserveFinishesAcknowledgedRuns in the root package.)
func TestStorageFullIs507(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := "mounting a tmpfs (needs root): " + strings.TrimSpace(string(out))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("skipping: " + msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	// A reserve of 16 MiB on a 4 MiB volume: never held.
	e := newEnv(t, storesqlite.URL(filepath.Join(dir, "t.db"))+"?disk_reserve=16777216")
	for name, req := range map[string]struct {
		path string
		body any
	}{
		"start": {"/v1/namespaces/default/runs", map[string]any{"workflow": "echo", "input": 1}},
		"batch": {"/v1/namespaces/default/runs:batch", map[string]any{"runs": []any{map[string]any{"workflow": "echo", "input": 1}}}},
	} {
		p := e.do("POST", req.path, "producer", req.body).problem(t, 507, "storage_full")
		if !strings.Contains(p.Detail, "disk reserve") || !strings.Contains(p.Detail, "free disk space") {
			t.Errorf("%s: detail %q does not say why and what to do", name, p.Detail)
		}
	}
	if n := e.runCount(); n != 0 {
		t.Fatalf("refused starts wrote %d runs", n)
	}
	c, err := trellis.Open(context.Background(), trellis.Config{Server: e.base, Token: "producer"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.StartRaw(context.Background(), "echo", []byte("1"), trellis.StartOptions{}); !errors.Is(err, trellis.ErrStorageFull) {
		t.Fatalf("a start through the Go client of the server: %v, want ErrStorageFull", err)
	}
	e.do("GET", "/v1/namespaces/default/runs", "reader", nil).want(t, 200)
}
