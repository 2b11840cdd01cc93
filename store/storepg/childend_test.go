package storepg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storepg"
)

// childEndEnv is a parent with one group of children, on two stores sharing a
// schema (two processes), whose enders batch the children's final checkpoints.
type childEndEnv struct {
	t      *testing.T
	stores [2]*storepg.Store
	prefix string // of the IDs and the workflows' names
	parent *store.ClaimedRun
}

func newChildEndEnv(t *testing.T, g *store.ChildGroup) *childEndEnv {
	t.Helper()
	url := pgtest.SchemaURL(t)
	return newChildEndEnvOn(t, [2]*storepg.Store{pgstore.Open(t, url, nil), pgstore.Open(t, url, nil)}, "", g)
}

// newChildEndEnvOn is newChildEndEnv on two open stores, with IDs that start with
// prefix, of workflows whose names start with prefix too (so that a run of
// another env, its lease expired, is not claimed here).
func newChildEndEnvOn(t *testing.T, stores [2]*storepg.Store, prefix string, g *store.ChildGroup) *childEndEnv {
	t.Helper()
	e := &childEndEnv{t: t, stores: stores, prefix: prefix}
	ctx := t.Context()
	res, err := e.stores[0].RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: prefix + "parent",
		WorkflowID: prefix + "parent", Workflow: prefix + "parent", Queue: "default"})
	if err != nil || !res.Created {
		t.Fatalf("RunCreate: %+v, %v", res, err)
	}
	e.parent = e.claim(prefix+"parent", 1)[0]
	for i := range cap(g.Runs) {
		id := fmt.Sprintf("%sc-%02d", prefix, i)
		g.Runs = append(g.Runs, &store.RunCreateParams{ID: id, WorkflowID: id, Workflow: prefix + "child", Queue: "default"})
	}
	_, err = e.stores[0].Checkpoint(ctx, &store.CheckpointParams{Lease: lease(e.parent), Status: store.StatusWaiting,
		WaitReason: "children", WaitEvents: []string{store.GroupEvent(g.Position)}, Children: []*store.ChildGroup{g}})
	if err != nil {
		t.Fatalf("Checkpoint with children: %v", err)
	}
	return e
}

func lease(cr *store.ClaimedRun) store.Lease {
	return store.Lease{Namespace: cr.Run.Namespace, RunID: cr.Run.ID, Token: cr.LeaseToken}
}

func (e *childEndEnv) claim(workflow string, max int) []*store.ClaimedRun {
	e.t.Helper()
	res, err := e.stores[0].RunsClaim(e.t.Context(), &store.RunsClaimParams{Namespace: "default",
		Workflows: []string{workflow}, Worker: "w", Max: max, LeaseDuration: time.Minute})
	if err != nil {
		e.t.Fatalf("RunsClaim(%s): %v", workflow, err)
	}
	return res.Runs
}

// endAll ends the children at once, alternating the stores; failed says which
// end failed.
func (e *childEndEnv) endAll(kids []*store.ClaimedRun, failed func(i int) bool) {
	e.t.Helper()
	e.endAllWith(kids, failed, func(int, *store.CheckpointParams) {})
}

// endAllWith is endAll with the final checkpoint of child i changed by edit.
func (e *childEndEnv) endAllWith(kids []*store.ClaimedRun, failed func(i int) bool, edit func(int, *store.CheckpointParams)) {
	e.t.Helper()
	// A deadlock that Postgres does not break (see TestChildEndsFailFastLockOrder)
	// shows as calls that end with this deadline.
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(kids))
	var wg sync.WaitGroup
	for i, k := range kids {
		p := &store.CheckpointParams{Lease: lease(k), Status: store.StatusSucceeded, Output: []byte(`1`)}
		if failed(i) {
			p.Status, p.Output, p.Error = store.StatusFailed, nil, &store.ErrorInfo{Message: "no"}
		}
		edit(i, p)
		wg.Go(func() { _, errs[i] = e.stores[i%2].Checkpoint(ctx, p) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			e.t.Fatalf("ending %s: %v", kids[i].Run.ID, err)
		}
	}
}

// outcomes returns the group events in the parent's inbox, once it is woken.
func (e *childEndEnv) outcomes(position int) []store.GroupOutcome {
	e.t.Helper()
	cr := e.claim(e.prefix+"parent", 1)
	if len(cr) != 1 {
		e.t.Fatal("parent not woken by its group's end")
	}
	var outs []store.GroupOutcome
	for _, ev := range cr[0].Inbox {
		var o store.GroupOutcome
		if err := json.Unmarshal(ev.Payload, &o); err != nil || ev.Name != store.GroupEvent(position) {
			e.t.Fatalf("inbox event %+v: %v", ev, err)
		}
		outs = append(outs, o)
	}
	return outs
}

// Children ending at once, in batches of two stores: the held ones are released in
// item order as a group's counters say, and the parent gets exactly one event.
func TestChildEndsConcurrently(t *testing.T) {
	t.Parallel()
	e := newChildEndEnv(t, &store.ChildGroup{Position: 1, MaxConcurrency: 8, Runs: make([]*store.RunCreateParams, 0, 40)})
	next := 0
	for wave := 0; next < 40; wave++ {
		kids := e.claim(e.prefix+"child", 100)
		if len(kids) != 8 {
			t.Fatalf("wave %d claimed %d children, want 8", wave, len(kids))
		}
		seen := make(map[string]bool)
		for _, k := range kids {
			seen[k.Run.ID] = true
		}
		for i := next; i < next+8; i++ {
			if id := fmt.Sprintf("c-%02d", i); !seen[id] {
				t.Fatalf("wave %d did not claim %s (released out of item order)", wave, id)
			}
		}
		next += 8
		e.endAll(kids, func(int) bool { return false })
	}
	want := store.GroupOutcome{Total: 40, Succeeded: 40}
	if got := e.outcomes(1); len(got) != 1 || got[0] != want {
		t.Fatalf("group events = %+v, want one %+v", got, want)
	}
}

// FailFast children failing at once: the group ends once, with every child counted.
func TestChildEndsConcurrentlyFailFast(t *testing.T) {
	t.Parallel()
	e := newChildEndEnv(t, &store.ChildGroup{Position: 2, FailFast: true, Runs: make([]*store.RunCreateParams, 0, 20)})
	kids := e.claim(e.prefix+"child", 100)
	if len(kids) != 20 {
		t.Fatalf("claimed %d children, want 20", len(kids))
	}
	e.endAll(kids, func(i int) bool { return i%3 == 1 })
	got := e.outcomes(2)
	if len(got) != 1 || got[0].Total != 20 || got[0].Failed == 0 ||
		got[0].Succeeded+got[0].Failed+got[0].Cancelled > 20 {
		t.Fatalf("group events = %+v, want one of 20 children with a failure", got)
	}
}

// noDeadlockBreaking opens two stores (two processes) on a fresh schema whose
// sessions run with deadlock_timeout set to an hour: Postgres does not break a
// deadlock within the test, so one shows as calls that end with their deadline.
func noDeadlockBreaking(t *testing.T) [2]*storepg.Store {
	t.Helper()
	url := pgtest.SchemaURL(t) + "&deadlock_timeout=3600s"
	return [2]*storepg.Store{pgstore.Open(t, url, nil), pgstore.Open(t, url, nil)}
}

// race runs calls at once, under one deadline. A call that ends with the deadline
// hung, a deadlock that Postgres does not break here (noDeadlockBreaking), and
// fails t; other errors are expected (a cancelled child's lease may be gone by
// its end, say).
type race struct {
	t      *testing.T
	round  int
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRace(t *testing.T, round int) *race {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	return &race{t: t, round: round, ctx: ctx, cancel: cancel}
}

// call runs f on a goroutine of its own; f reports each of its calls' errors
// through check.
func (r *race) call(f func(ctx context.Context, check func(what string, err error))) {
	r.wg.Go(func() {
		f(r.ctx, func(what string, err error) {
			if err != nil && r.ctx.Err() != nil {
				r.t.Errorf("round %d: %s: %v", r.round, what, err)
			}
		})
	})
}

// wait waits for every call and reports whether none hung.
func (r *race) wait() bool {
	r.wg.Wait()
	r.cancel()
	return !r.t.Failed()
}

// failFastRound is round's parent, with a FailFast group of n children.
func failFastRound(t *testing.T, stores [2]*storepg.Store, round, n int) *childEndEnv {
	t.Helper()
	return newChildEndEnvOn(t, stores, fmt.Sprintf("r%02d-", round), &store.ChildGroup{Position: 1,
		FailFast: true, Runs: make([]*store.RunCreateParams, 0, n)})
}

// FailFast groups whose children end at once through the enders of two stores,
// with deadlock_timeout set to an hour so that Postgres does not break a deadlock
// within the test. A batch that fails a FailFast group cancels the unfinished
// children, which the other store's batch (or a child's end on the waiting path)
// may hold already; that one must not hold them while it waits for the group's
// row, or both wait for ever. Each round is a fresh group of 20 children of which
// a few fail.
func TestChildEndsFailFastLockOrder(t *testing.T) {
	t.Parallel()
	stores := noDeadlockBreaking(t)
	for round := range 15 {
		e := failFastRound(t, stores, round, 20)
		kids := e.claim(e.prefix+"child", 100)
		if len(kids) != 20 {
			t.Fatalf("round %d claimed %d children, want 20", round, len(kids))
		}
		// Every other child's end takes the waiting path (a guard against an event
		// that never comes), which ends a child in a transaction of its own.
		e.endAllWith(kids, func(i int) bool { return i%7 == 3 }, func(i int, p *store.CheckpointParams) {
			if i%2 == 0 {
				p.NoEvents = []string{"never-sent"}
			}
		})
		got := e.outcomes(1)
		if len(got) != 1 || got[0].Total != 20 || got[0].Failed == 0 {
			t.Fatalf("round %d: group events = %+v, want one of 20 children with a failure", round, got)
		}
	}
}

// A parent cancelled while the children of its FailFast group checkpoint and end
// through two stores, some failing, some on the waiting path; deadlock_timeout is
// an hour, so that a deadlock hangs the calls until their deadline. The
// cancellation locks the parent, then its children; a batch of checkpoints locks
// its runs in sequence order; a transaction that ends children locks their parent,
// then their group, then them. Before (27 Nov), the cancellation locked the
// children last item first and a batch of the children's checkpoints locked them
// in sequence order (including the children whose final checkpoint it leaves to
// the ender), and the transaction that failed the group wanted the parent last:
// each could hold a run the other waited for.
func TestCancelParentWhileGroupFails(t *testing.T) {
	t.Parallel()
	stores := noDeadlockBreaking(t)
	for round := range 20 {
		e := failFastRound(t, stores, round, 10)
		kids := e.claim(e.prefix+"child", 100)
		r := newRace(t, round)
		r.call(func(ctx context.Context, check func(string, error)) {
			_, err := stores[1].RunCancel(ctx, &store.RunCancelParams{Namespace: "default", Ref: e.prefix + "parent"})
			check("cancelling the parent", err)
		})
		for i, k := range kids {
			r.call(func(ctx context.Context, check func(string, error)) {
				s := stores[i%2]
				_, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: lease(k), Status: store.StatusRunning})
				check("checkpointing "+k.Run.ID, err)
				p := &store.CheckpointParams{Lease: lease(k), Status: store.StatusSucceeded, Output: []byte(`1`)}
				if i%3 == 0 {
					p.Status, p.Output, p.Error = store.StatusFailed, nil, &store.ErrorInfo{Message: "no"}
				}
				if i%4 == 1 {
					p.NoEvents = []string{"never-sent"}
				}
				_, err = s.Checkpoint(ctx, p)
				check("ending "+k.Run.ID, err)
			})
		}
		if !r.wait() {
			return
		}
		children, err := stores[0].RunChildren(t.Context(), &store.RunChildrenParams{Namespace: "default",
			Parent: e.prefix + "parent", Position: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range children {
			if !c.Status.Terminal() {
				t.Fatalf("round %d: child %s is %s after every child ended", round, c.ID, c.Status)
			}
		}
	}
}

// Children cancelled one by one (not through their parent) while other children of
// their FailFast group fail, through two stores, with deadlock_timeout an hour. A
// child that has not run ends at its cancellation and is counted in its group,
// which may fail the group and cancel the rest: the cancellation must take the
// parent and the group before the child, as a child's end does.
func TestCancelChildrenWhileGroupFails(t *testing.T) {
	t.Parallel()
	stores := noDeadlockBreaking(t)
	for round := range 20 {
		e := failFastRound(t, stores, round, 12)
		kids := e.claim(e.prefix+"child", 6) // the other 6 have not run
		r := newRace(t, round)
		claimed := make(map[string]bool)
		for i, k := range kids {
			claimed[k.Run.ID] = true
			r.call(func(ctx context.Context, check func(string, error)) {
				p := &store.CheckpointParams{Lease: lease(k), Status: store.StatusFailed, Error: &store.ErrorInfo{Message: "no"}}
				if i%2 == 1 {
					p.Status, p.Error, p.Output = store.StatusSucceeded, nil, []byte(`1`)
				}
				_, err := stores[i%2].Checkpoint(ctx, p)
				check("ending "+k.Run.ID, err)
			})
		}
		for i := range 12 {
			id := fmt.Sprintf("%sc-%02d", e.prefix, i)
			if claimed[id] {
				continue
			}
			r.call(func(ctx context.Context, check func(string, error)) {
				_, err := stores[(i+1)%2].RunCancel(ctx, &store.RunCancelParams{Namespace: "default", Ref: id})
				check("cancelling "+id, err)
			})
		}
		if !r.wait() {
			return
		}
	}
}
