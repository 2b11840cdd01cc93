package storejs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// A follower whose replica lags behind the log does not answer "not found"
// for a run the writer acknowledged: the read waits until the replica applied
// the log's end as of the read, then answers the run. A run that does not
// exist is still not found once confirmed, a follower that cannot reach the
// log's end in time answers an error that is not "not found", and a writer
// answers from its replica at once.
func TestFollowerConfirmsNotFound(t *testing.T) {
	ctx := context.Background()
	a, b := writerAndFollower(t, nil)
	if err := createRun(ctx, view(a), "first"); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, b, a.appliedSeq(), 10*time.Second)

	// Hold b's follower before it applies the next record.
	held := make(chan uint64, 16)
	release := make(chan struct{})
	gate := func(seq uint64) {
		held <- seq
		<-release
	}
	b.beforeApply.Store(&gate)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	if err := createRun(ctx, view(a), "second"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("b's follower did not reach the record of run second")
	}
	if _, err := b.rep.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "second"}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("b's replica read while held: %v, want it not to hold run second yet", err)
	}

	// Not held long enough: the read fails, but not as "not found".
	defer func(d time.Duration) { confirmTimeout = d }(confirmTimeout)
	confirmTimeout = 300 * time.Millisecond
	_, err := b.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "second"})
	if err == nil || errors.Is(err, store.ErrRunNotFound) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b.RunGet while its replica cannot catch up: %v, want a deadline error that is not ErrRunNotFound", err)
	}
	confirmTimeout = 10 * time.Second

	// Released while the read waits: the read answers the run.
	got := make(chan error, 1)
	go func() {
		run, err := b.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "second"})
		if err == nil && run.ID != "second" {
			err = errors.New("got run " + run.ID)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("b.RunGet answered while its replica was held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	b.beforeApply.Store(nil)
	close(release)
	released = true
	if err := <-got; err != nil {
		t.Fatalf("b.RunGet of a run the writer acknowledged: %v", err)
	}

	// What does not exist is not found, on the follower and on the writer.
	for _, s := range []*Store{b, a} {
		if _, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "never"}); !errors.Is(err, store.ErrRunNotFound) {
			t.Fatalf("RunGet of a run never created: %v, want ErrRunNotFound", err)
		}
		if _, err := s.ScheduleGet(ctx, &store.ScheduleGetParams{Namespace: "default", Name: "never"}); !errors.Is(err, store.ErrScheduleNotFound) {
			t.Fatalf("ScheduleGet of a schedule never created: %v, want ErrScheduleNotFound", err)
		}
	}
}
