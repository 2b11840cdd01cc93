package streams_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/streams"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// subscriptions is a real store that reports each topic Follow subscribes to.
type subscriptions struct {
	*storesqlite.Store
	topics chan string
}

func (s subscriptions) Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error) {
	ch, stop, err := s.Store.Subscribe(ctx, topic)
	s.topics <- topic
	return ch, stop, err
}

// A follower of a run whose stream is empty (a job's: it writes none) is woken
// by the run's end, not by a poll, and ends with the final event the record
// gives. The poll is set to an hour, so only the wake-up can end Follow.
func TestFollowWakesAtTheEndOfARunWithoutEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := storesqlite.Open(ctx, storesqlite.Config{Path: filepath.Join(t.TempDir(), "s.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: "job", WorkflowID: "job", Workflow: "double", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"double"}, Worker: "w", Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(claimed.Runs) != 1 {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	src := subscriptions{Store: st, topics: make(chan string, 4)}
	var (
		got []string
		mu  sync.Mutex
	)
	done := make(chan error, 1)
	go func() {
		done <- streams.Follow(ctx, src, "ns", "job", 0, streams.Options{Poll: time.Hour}, func(ev *store.StreamEvent) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ev.Name+"="+string(ev.Data))
			return nil
		})
	}()
	for _, want := range []string{store.StreamTopic("ns", "job"), store.RunTopic("ns", "job")} {
		select {
		case topic := <-src.topics:
			if topic != want {
				t.Fatalf("Follow subscribed to %q, want %q", topic, want)
			}
		case <-ctx.Done():
			t.Fatalf("Follow never subscribed to %q", want)
		}
	}
	cr := claimed.Runs[0]
	if _, err := st.Checkpoint(ctx, &store.CheckpointParams{Lease: store.Lease{Namespace: "ns", RunID: "job", Token: cr.LeaseToken},
		Status: store.StatusSucceeded, Output: []byte(`42`)}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Follow: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != `run.succeeded={"result":42}` {
		t.Fatalf("events %v, want [run.succeeded={\"result\":42}]", got)
	}
}

// reads is a real store that counts Follow's reads.
type reads struct {
	*storesqlite.Store
	n atomic.Int64
}

func (r *reads) StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	r.n.Add(1)
	return r.Store.StreamRead(ctx, p)
}

// A follower of a SQLite store polls for other processes' events: its polls
// read nothing while only its own store commits, and the events another store
// on the same file writes reach it by the next poll after them.
func TestFollowPollsForAnotherProcesssEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	first, elsewhere := twoStoresOnOneFile(t)
	here := &reads{Store: first}
	if _, err := here.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: "r", WorkflowID: "r", Workflow: "wf", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	claimed, err := elsewhere.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"wf"}, Worker: "w", Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(claimed.Runs) != 1 {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	lease := store.Lease{Namespace: "ns", RunID: "r", Token: claimed.Runs[0].LeaseToken}
	got := make(chan string, 8)
	done := make(chan error, 1)
	go func() {
		done <- streams.Follow(ctx, here, "ns", "r", 0, streams.Options{Poll: 5 * time.Millisecond}, func(ev *store.StreamEvent) error {
			got <- ev.Name
			return nil
		})
	}()
	// The first two reads (of an empty stream, see above), and perhaps one
	// after the first poll: wait until the reads stop.
	settled := here.n.Load()
	for {
		time.Sleep(30 * time.Millisecond)
		if n := here.n.Load(); n >= 2 && n == settled {
			break
		} else {
			settled = n
		}
	}
	for i := range 10 { // the follower's own store commits, and polls between
		if _, err := here.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: fmt.Sprint("other-", i), WorkflowID: fmt.Sprint("other-", i), Workflow: "wf", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := here.n.Load(); n != settled {
		t.Fatalf("%d reads with no other process's commit, want %d", n, settled)
	}
	if _, err := elsewhere.Checkpoint(ctx, &store.CheckpointParams{Lease: lease, Status: store.StatusRunning,
		Stream: []store.StreamWrite{{Name: "progress", Data: []byte(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	if name := <-got; name != "progress" {
		t.Fatalf("first event %q, want progress", name)
	}
	if _, err := elsewhere.Checkpoint(ctx, &store.CheckpointParams{Lease: lease, Status: store.StatusSucceeded, Output: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	// The run's end, committed elsewhere, ends Follow by a poll as well.
	if err := <-done; err != nil {
		t.Fatalf("Follow: %v", err)
	}
}

// twoStoresOnOneFile opens two stores on one new SQLite file, as two processes
// would; both are closed at cleanup.
func twoStoresOnOneFile(t *testing.T) (*storesqlite.Store, *storesqlite.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	open := func() *storesqlite.Store {
		st, err := storesqlite.Open(t.Context(), storesqlite.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	return open(), open()
}
