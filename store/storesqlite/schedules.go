package storesqlite

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
	err := s.write(ctx, func(tx *wtx) (err error) {
		sc, err = shared.ScheduleCreate(tx, p)
		return err
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
	err := s.write(ctx, func(tx *wtx) (err error) {
		sc, err = shared.ScheduleUpdate(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("updating schedule: %w", err)
	}
	return sc, nil
}

// SchedulePause implements store.ScheduleStore.
func (s *Store) SchedulePause(ctx context.Context, p *store.SchedulePauseParams) (*store.Schedule, error) {
	var sc *store.Schedule
	err := s.write(ctx, func(tx *wtx) (err error) {
		sc, err = shared.SchedulePause(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pausing or resuming schedule: %w", err)
	}
	return sc, nil
}

// ScheduleDelete implements store.ScheduleStore.
func (s *Store) ScheduleDelete(ctx context.Context, p *store.ScheduleGetParams) error {
	err := s.write(ctx, func(tx *wtx) error { return shared.ScheduleDelete(tx, p) })
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
	err := s.write(ctx, func(tx *wtx) error {
		res = &store.ScheduleFireResult{}
		if err := shared.ScheduleFireBegin(tx, p); err != nil {
			return err
		}
		runID := ""
		if p.Run != nil {
			runID = p.Run.ID
			existing, err := shared.RunByRef(tx, p.Namespace, p.Run.ID)
			switch {
			case err == nil:
				res.Run = existing
			case !errors.Is(err, store.ErrRunNotFound):
				return err
			default:
				c, err := runCreate(tx, p.Run)
				if err != nil {
					return err
				}
				res.Run, res.Created = c.Run, true
			}
		}
		return shared.ScheduleFireEnd(tx, p, runID)
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
	err := s.write(ctx, func(tx *wtx) (err error) {
		l, err = shared.SchedulerLeaseAcquire(tx, p)
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
	err := s.write(ctx, func(tx *wtx) error { return shared.SchedulerLeaseRelease(tx, p) })
	if err != nil {
		return fmt.Errorf("releasing scheduler lease: %w", err)
	}
	return nil
}
