package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

func TestWorkersList(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("served", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c := openClient(t, url, false, wf)
	startAndWait(t, c, wf, "w-1") // the worker records itself before it claims

	res := trellisCmd(t, "workers", "list", "--json", "--store", url).ok(t)
	var out struct{ Workers []*store.Worker }
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("workers list --json: %v\n%s", err, res.stdout)
	}
	if len(out.Workers) != 1 {
		t.Fatalf("workers = %d, want 1:\n%s", len(out.Workers), res.stdout)
	}
	w := out.Workers[0]
	if !w.Live || !slices.Equal(w.Workflows, []string{"served"}) || len(w.Queues) != 0 || w.Namespace != "default" {
		t.Fatalf("worker = %+v", w)
	}
	res = trellisCmd(t, "workers", "list", "--store", url).ok(t)
	contains(t, "workers list", res.stdout, "NAME", "LIVE", "LAST SEEN", w.Name, "yes", "served", "all", "ago)")
	res = trellisCmd(t, "workers", "list", "--namespace", "other", "--store", url).ok(t)
	contains(t, "workers list of another namespace", res.stdout, `no workers in namespace "other"`)

	if err := c.Close(); err != nil { // a graceful stop removes the record
		t.Fatal(err)
	}
	res = trellisCmd(t, "workers", "list", "--store", url).ok(t)
	contains(t, "workers list after the worker stopped", res.stdout, `no workers in namespace "default"`)
}

func TestWorkersListUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"workers"},
		{"workers", "frob"},
		{"workers", "list"},
		{"workers", "list", "extra", "--store", "sqlite:///x.db"},
	} {
		if res := trellisCmd(t, args...); res.code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, res.code, res.stderr)
		}
	}
	res := trellisCmd(t, "workers", "list", "--store", "sqlite://"+t.TempDir()+"/missing.db")
	contains(t, "workers list of a missing store", res.stderr, "no store at")
	res = trellisCmd(t, "help").ok(t)
	contains(t, "help", res.stdout, "workers")
}
