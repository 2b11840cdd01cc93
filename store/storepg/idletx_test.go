package storepg

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
)

// A process frozen inside one of the store's transactions (SIGSTOP, a paused
// VM) loses that transaction after idle_in_transaction_session_timeout, and with
// it its row locks: here a frozen transaction holding the scheduler lease's row,
// as a leader frozen inside a schedule's fire does, no longer keeps another
// server from taking the lease. A transactional step's own transaction may
// pause longer (CheckpointTx turns the timeout off for it).
func TestFrozenTransactionReleasesItsLocks(t *testing.T) {
	ctx := context.Background()
	url := pgtest.SchemaURL(t)
	open := func(u string) *Store {
		t.Helper()
		cfg, err := ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	show := func(s *Store) string {
		t.Helper()
		var v string
		if err := s.pool.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	other := open(url)
	if v := show(other); v != idleInTxTimeout {
		t.Fatalf("default idle_in_transaction_session_timeout = %q, want %q", v, idleInTxTimeout)
	}
	frozen := open(url + "&idle_in_transaction_session_timeout=300ms")
	if v := show(frozen); v != "300ms" {
		t.Fatalf("idle_in_transaction_session_timeout from the URL = %q, want 300ms", v)
	}

	if _, err := frozen.SchedulerLeaseAcquire(ctx, &store.SchedulerLeaseParams{Owner: "frozen", Duration: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	tx, err := frozen.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE scheduler_lease SET epoch = epoch WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // frozen, the lease row locked
	actx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	l, err := other.SchedulerLeaseAcquire(actx, &store.SchedulerLeaseParams{Owner: "other", Duration: 10 * time.Second})
	if err != nil || !l.Held {
		t.Fatalf("taking the lease from a frozen holder: %+v, %v; want it taken", l, err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the frozen transaction committed after its session's timeout")
	}

	run, err := frozen.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: "r1", WorkflowID: "r1", Workflow: "w", Queue: "default"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := frozen.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Worker: "w1", Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 1 || res.Runs[0].Run.ID != run.Run.ID {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	p := &store.CheckpointParams{Lease: res.Runs[0].Lease(), Status: store.StatusSucceeded, Output: []byte(`1`)}
	if _, err := frozen.CheckpointTx(ctx, p, func(context.Context, any) error {
		time.Sleep(time.Second) // the step's own code pauses past the store's timeout
		return nil
	}); err != nil {
		t.Fatalf("CheckpointTx whose step paused past the store's idle timeout: %v", err)
	}
}
