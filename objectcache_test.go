package trellis

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Concurrent lookups of a record that is not cached share one read; a lookup
// after forget does not wait for a read begun before it, whose record is not
// kept; a lookup whose shared read failed reads for itself.
func TestObjectCacheSharesReads(t *testing.T) {
	var oc objectCache
	key := [2]string{"ns", ""}
	var reads atomic.Int32
	release := make(chan struct{})
	slow := func() (objectEntry, error) {
		reads.Add(1)
		<-release
		return objectEntry{minLimit: 1}, nil
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			e, err := oc.lookup(t.Context(), key, slow)
			if err != nil || e.minLimit != 1 {
				t.Errorf("lookup: %+v, %v", e, err)
			}
		})
	}
	for reads.Load() == 0 {
		runtime.Gosched() // until the first read begins
	}
	close(release)
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Errorf("50 concurrent lookups read %d times, want 1", n)
	}
	if e, _ := oc.lookup(t.Context(), key, func() (objectEntry, error) { t.Error("fresh record read again"); return objectEntry{}, nil }); e.minLimit != 1 {
		t.Errorf("cached: %+v", e)
	}

	// forget during a read: the next lookup reads anew, and the old read's record is not kept.
	oc.forget(key)
	started, finish := make(chan struct{}), make(chan struct{})
	oldDone := make(chan struct{})
	go func() {
		defer close(oldDone)
		oc.lookup(t.Context(), key, func() (objectEntry, error) {
			close(started)
			<-finish
			return objectEntry{minLimit: 2}, nil // read before the change
		})
	}()
	<-started
	oc.forget(key)
	e, err := oc.lookup(t.Context(), key, func() (objectEntry, error) { return objectEntry{minLimit: 3}, nil })
	if err != nil || e.minLimit != 3 {
		t.Errorf("after forget: %+v, %v; want the new read's record", e, err)
	}
	close(finish)
	<-oldDone
	if e, _ := oc.lookup(t.Context(), key, func() (objectEntry, error) { return objectEntry{minLimit: 4}, nil }); e.minLimit != 3 {
		t.Errorf("kept %+v, want the record read after forget (3)", e)
	}

	// the shared read fails: its waiter reads for itself; a waiter whose context ends returns.
	key = [2]string{"ns", "q"}
	started, finish = make(chan struct{}), make(chan struct{})
	go oc.lookup(t.Context(), key, func() (objectEntry, error) {
		close(started)
		<-finish
		return objectEntry{}, errors.New("leader's context ended")
	})
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := oc.lookup(ctx, key, slow); !errors.Is(err, context.Canceled) {
		t.Errorf("waiter with an ended context: %v", err)
	}
	got := make(chan objectEntry)
	go func() {
		e, _ := oc.lookup(t.Context(), key, func() (objectEntry, error) { return objectEntry{minLimit: 5}, nil })
		got <- e
	}()
	close(finish)
	if e := <-got; e.minLimit != 5 {
		t.Errorf("after a failed shared read: %+v, want its own read (5)", e)
	}
}
