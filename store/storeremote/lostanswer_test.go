package storeremote_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// droppingTransport delivers calls to the server but loses the answers of the
// next drop calls whose path ends with suffix, as a connection that breaks after
// the server applied the call but before its answer arrived.
type droppingTransport struct {
	suffix  atomic.Value // string
	drop    atomic.Int64
	dropped atomic.Int64
}

func (d *droppingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	suffix, _ := d.suffix.Load().(string)
	if err != nil || suffix == "" || !strings.HasSuffix(r.URL.Path, suffix) || d.drop.Add(-1) < 0 {
		return res, err
	}
	_, _ = io.Copy(io.Discard, res.Body) // the server finished the call
	res.Body.Close()
	d.dropped.Add(1)
	return nil, errors.New("connection reset by peer (test)")
}

func (d *droppingTransport) arm(suffix string, n int64) {
	d.suffix.Store(suffix)
	d.drop.Store(n)
}

// A guarded checkpoint or release (with a Seq) whose answer was lost is sent
// again and applied once: the retry is answered as replayed. An unguarded one
// fails with the transport's error, since it may or may not have been applied.
func TestLostAnswersAreRetried(t *testing.T) {
	ctx := t.Context()
	tr := &droppingTransport{}
	st, rs := sqliteServer(t, tr)
	for _, id := range []string{"r1", "r2", "r3"} {
		if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := rs.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"wf"}, Worker: "w", Max: 3, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 3 {
		t.Fatalf("claim: %d runs, %v", len(res.Runs), err)
	}
	lease := map[string]store.Lease{}
	for _, cr := range res.Runs {
		lease[cr.Run.ID] = cr.Lease()
	}

	tr.arm("/Checkpoint", 1)
	ck, err := rs.Checkpoint(ctx, &store.CheckpointParams{Lease: lease["r1"], Seq: 1, Status: store.StatusSucceeded,
		Output: []byte(`"done"`), Stream: []store.StreamWrite{{Name: "run.succeeded", Data: []byte(`"done"`)}}})
	if err != nil || !ck.Replayed {
		t.Fatalf("guarded checkpoint whose answer was lost = %+v, %v; want replayed, no error", ck, err)
	}
	if tr.dropped.Load() != 1 {
		t.Fatalf("dropped %d answers, want 1", tr.dropped.Load())
	}
	ev, err := st.StreamRead(ctx, &store.StreamReadParams{Namespace: "default", RunID: "r1", Limit: 10})
	if err != nil || len(ev.Events) != 1 {
		t.Fatalf("stream of r1 = %+v, %v; want one event", ev, err)
	}
	if r, err := st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r1"}); err != nil || r.Status != store.StatusSucceeded {
		t.Fatalf("r1 = %+v, %v; want succeeded", r, err)
	}

	tr.arm("/ReleaseLease", 1)
	if err := rs.LeaseRelease(ctx, &store.LeaseReleaseParams{Lease: lease["r2"], Seq: 1}); err != nil {
		t.Fatalf("guarded release whose answer was lost: %v", err)
	}
	if r, err := st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r2"}); err != nil || r.Status != store.StatusPending {
		t.Fatalf("r2 = %+v, %v; want pending", r, err)
	}

	tr.arm("/Checkpoint", 1)
	_, err = rs.Checkpoint(ctx, &store.CheckpointParams{Lease: lease["r3"], Status: store.StatusSucceeded, Output: []byte(`1`)})
	if err == nil {
		t.Fatal("unguarded checkpoint whose answer was lost succeeded; want the transport's error")
	}
	if tr.dropped.Load() != 3 {
		t.Fatalf("dropped %d answers, want 3", tr.dropped.Load())
	}
}

// RunsResumeBlocked, which a worker calls as it registers workflows, is sent
// again when its answer is lost: a worker starting while its server (or the
// server's store writer) changes does not fail to register.
func TestResumeBlockedIsSentAgain(t *testing.T) {
	ctx := t.Context()
	tr := &droppingTransport{}
	_, rs := sqliteServer(t, tr)
	tr.arm("/ResumeBlocked", 2)
	if _, err := rs.RunsResumeBlocked(ctx, &store.RunsResumeBlockedParams{Namespace: "default", Workflows: []string{"wf"}}); err != nil {
		t.Fatalf("RunsResumeBlocked after two lost answers: %v", err)
	}
	if tr.dropped.Load() != 2 {
		t.Fatalf("dropped %d answers, want 2", tr.dropped.Load())
	}
}
