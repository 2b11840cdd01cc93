package storepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// The schedule store is written once, in sqlstore (schedules.go); these are its
// entry points. ScheduleFire adds this driver's run creation between the shared
// fence and cursor steps, in one write transaction.

// ScheduleCreate implements store.ScheduleStore.
func (s *Store) ScheduleCreate(ctx context.Context, p *store.ScheduleCreateParams) (*store.Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating schedule: %w", err)
	}
	var sc *store.Schedule
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		if err := shared.IdempotencyBegin(stx{tx}, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		if sc, err = shared.ScheduleCreate(stx{tx}, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(stx{tx}, p.Namespace, p.Idempotency, sc)
	})
	if err != nil {
		return nil, fmt.Errorf("creating schedule: %w", err)
	}
	return sc, nil
}

// ScheduleGet implements store.ScheduleStore.
func (s *Store) ScheduleGet(ctx context.Context, p *store.ScheduleGetParams) (*store.Schedule, error) {
	return shared.Reads(readSource{s}).ScheduleGet(ctx, p)
}

// ScheduleList implements store.ScheduleStore.
func (s *Store) ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]*store.Schedule, error) {
	return shared.Reads(readSource{s}).ScheduleList(ctx, p)
}

// ScheduleUpdate implements store.ScheduleStore.
func (s *Store) ScheduleUpdate(ctx context.Context, p *store.ScheduleUpdateParams) (*store.Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("updating schedule: %w", err)
	}
	var sc *store.Schedule
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		if err := shared.IdempotencyBegin(stx{tx}, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		if sc, err = shared.ScheduleUpdate(stx{tx}, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(stx{tx}, p.Namespace, p.Idempotency, sc)
	})
	if err != nil {
		return nil, fmt.Errorf("updating schedule: %w", err)
	}
	return sc, nil
}

// SchedulePause implements store.ScheduleStore.
func (s *Store) SchedulePause(ctx context.Context, p *store.SchedulePauseParams) (*store.Schedule, error) {
	if err := p.Idempotency.Validate(); err != nil {
		return nil, fmt.Errorf("pausing or resuming schedule: %w", err)
	}
	var sc *store.Schedule
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		if err := shared.IdempotencyBegin(stx{tx}, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		if sc, err = shared.SchedulePause(stx{tx}, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(stx{tx}, p.Namespace, p.Idempotency, sc)
	})
	if err != nil {
		return nil, fmt.Errorf("pausing or resuming schedule: %w", err)
	}
	return sc, nil
}

// ScheduleDelete implements store.ScheduleStore.
func (s *Store) ScheduleDelete(ctx context.Context, p *store.ScheduleDeleteParams) error {
	if err := p.Idempotency.Validate(); err != nil {
		return fmt.Errorf("deleting schedule: %w", err)
	}
	err := s.inTx(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(stx{tx}, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		if err := shared.ScheduleDelete(stx{tx}, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(stx{tx}, p.Namespace, p.Idempotency, nil)
	})
	if err != nil {
		return fmt.Errorf("deleting schedule: %w", err)
	}
	return nil
}

// ScheduleFire implements store.ScheduleStore.
func (s *Store) ScheduleFire(ctx context.Context, p *store.ScheduleFireParams) (*store.ScheduleFireResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("firing schedule: %w", err)
	}
	var res *store.ScheduleFireResult
	err := s.inTx(ctx, func(tx *wtx) error {
		res = &store.ScheduleFireResult{}
		if err := shared.IdempotencyBegin(stx{tx}, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		if err := shared.ScheduleFireBegin(stx{tx}, p); err != nil {
			return err
		}
		runID := ""
		for i, rp := range p.AllRuns() {
			runID = rp.ID
			run, created, err := s.fireRun(tx, rp)
			if err != nil {
				return err
			}
			if i == 0 && p.Run != nil {
				res.Run, res.Created = run, created
			} else {
				res.Runs, res.RunsCreated = append(res.Runs, run), append(res.RunsCreated, created)
			}
		}
		if err := shared.ScheduleFireEnd(stx{tx}, p, runID); err != nil {
			return err
		}
		return shared.IdempotencyFinish(stx{tx}, p.Namespace, p.Idempotency, res)
	})
	if err != nil {
		return nil, fmt.Errorf("firing schedule: %w", err)
	}
	return res, nil
}

// SchedulerLeaseAcquire implements store.ScheduleStore.
func (s *Store) SchedulerLeaseAcquire(ctx context.Context, p *store.SchedulerLeaseParams) (*store.SchedulerLease, error) {
	if err := p.Validate(true); err != nil {
		return nil, fmt.Errorf("acquiring scheduler lease: %w", err)
	}
	var l *store.SchedulerLease
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		l, err = shared.SchedulerLeaseAcquire(stx{tx}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("acquiring scheduler lease: %w", err)
	}
	return l, nil
}

// SchedulerLeaseRelease implements store.ScheduleStore.
func (s *Store) SchedulerLeaseRelease(ctx context.Context, p *store.SchedulerLeaseParams) error {
	if err := p.Validate(false); err != nil {
		return fmt.Errorf("releasing scheduler lease: %w", err)
	}
	err := s.inTx(ctx, func(tx *wtx) error { return shared.SchedulerLeaseRelease(stx{tx}, p) })
	if err != nil {
		return fmt.Errorf("releasing scheduler lease: %w", err)
	}
	return nil
}

// fireRun creates a scheduled run, or finds it when it exists (a retried fire).
func (s *Store) fireRun(tx *wtx, p *store.RunCreateParams) (*store.Run, bool, error) {
	existing, err := shared.RunByRef(stx{tx}, p.Namespace, p.ID)
	switch {
	case err == nil:
		return existing, false, nil
	case !errors.Is(err, store.ErrRunNotFound):
		return nil, false, err
	}
	c, err := s.runCreateInTx(tx, p)
	if err != nil {
		return nil, false, err
	}
	return c.Run, true, nil
}

// runCreateInTx creates a run in a transaction of the waiting path (txn.go),
// signalling the workers when it commits.
func (s *Store) runCreateInTx(tx *wtx, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	st, cr, err := s.runCreateStmt(p)
	if err != nil {
		return nil, err
	}
	res := cr.res
	if err := runInTx(tx.ctx, tx.Tx, "", st); err != nil {
		return nil, err
	}
	if *res == nil {
		return nil, store.RunExistsError(p.ID, p.WorkflowID, store.ReuseRejectActive)
	}
	tx.publish(store.RunTopic(p.Namespace, p.ID), store.TopicReady)
	return *res, nil
}
