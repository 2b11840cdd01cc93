package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// failingReads fails every read of run once armed (a RunsGet naming it, as the
// results watcher reads), as a store whose disk or connection failed would.
type failingReads struct {
	store.Store
	run   string
	armed atomic.Bool
	fails atomic.Int32
}

func (s *failingReads) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	if s.armed.Load() && slices.Contains(p.IDs, s.run) {
		s.fails.Add(1)
		return nil, errors.New("reading runs: disk on fire")
	}
	return s.Store.RunsGet(ctx, p)
}

// TestWaitRunsStoreFailsMidAnswer: when the store fails after the answer of
// runs:wait began (a 200 with lines already sent), the answer ends with a last
// line {"error"}, an internal problem that names the request and not the
// store's error, instead of {"done"}: the client waits again for the runs it
// was not told of.
func TestWaitRunsStoreFailsMidAnswer(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			var reads *failingReads
			e := newEnv(t, url(t), func(cfg *Config) {
				reads = &failingReads{Store: cfg.Backend}
				cfg.Backend = reads
			})
			a := e.start("echo", map[string]any{"x": 1}, nil)
			b := e.start("await-go", nil, nil)
			e.waitRun(a.ID)
			reads.run = b.ID
			next, status, _ := e.waitLines("runs="+a.ID+","+b.ID+"&wait=10s", "reader")
			if status != 200 {
				t.Fatalf("status %d", status)
			}
			if l := next(); l == nil || l.Run == nil || l.Run.ID != a.ID {
				t.Fatalf("first line %+v, want the ended run %s", l, a.ID)
			}
			reads.armed.Store(true) // the run waited for is read again when it ends: that read fails
			e.do("POST", "/v1/namespaces/default/runs/"+b.ID+"/events", "producer", map[string]any{"name": "go", "payload": "hi"}).want(t, 204)
			l := next()
			switch {
			case l == nil:
				t.Fatal("the answer ended without a last line")
			case l.Error == nil || l.Done || l.Run != nil:
				t.Fatalf("last line %+v, want an error", l)
			case l.Error.Status != 500 || l.Error.Code != "internal" || l.Error.RequestID == "":
				t.Fatalf("error %+v, want an internal problem with the request's ID", *l.Error)
			case strings.Contains(l.Error.Detail, "disk on fire"):
				t.Fatalf("the problem shows the store's error: %q", l.Error.Detail)
			}
			if l := next(); l != nil {
				t.Fatalf("a line after the last: %+v", l)
			}
			if reads.fails.Load() == 0 {
				t.Fatal("no read of the run failed")
			}
		})
	}
}
