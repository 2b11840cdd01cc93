package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// The entry points of the state machines written in this package: each
// validates its parameters, enters the driver's transaction (Driver) and runs
// the state machine in it.

// NamespaceCreate implements store.QueueStore.
func (m *Methods) NamespaceCreate(ctx context.Context, p *store.NamespaceCreateParams) (*store.Namespace, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating namespace: %w", err)
	}
	return guarded(m, ctx, "creating namespace", p.Name, p.Idempotency, func(tx Tx) (*store.Namespace, error) {
		return m.sql.NamespaceCreate(tx, p)
	})
}

// NamespaceGet implements store.QueueStore.
func (m *Methods) NamespaceGet(ctx context.Context, p *store.NamespaceGetParams) (*store.Namespace, error) {
	return m.reads.NamespaceGet(ctx, p)
}

// NamespaceList implements store.QueueStore.
func (m *Methods) NamespaceList(ctx context.Context) ([]*store.Namespace, error) {
	return m.reads.NamespaceList(ctx)
}

// NamespaceUpdate implements store.QueueStore.
func (m *Methods) NamespaceUpdate(ctx context.Context, p *store.NamespaceUpdateParams) (*store.Namespace, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("updating namespace: %w", err)
	}
	return guarded(m, ctx, "updating namespace", p.Name, p.Idempotency, func(tx Tx) (*store.Namespace, error) {
		return m.sql.NamespaceUpdate(tx, p)
	})
}

// QueueCreate implements store.QueueStore.
func (m *Methods) QueueCreate(ctx context.Context, p *store.QueueCreateParams) (*store.Queue, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating queue: %w", err)
	}
	return guarded(m, ctx, "creating queue", p.Namespace, p.Idempotency, func(tx Tx) (*store.Queue, error) {
		return m.sql.QueueCreate(tx, p)
	})
}

// QueueGet implements store.QueueStore.
func (m *Methods) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.Queue, error) {
	return m.reads.QueueGet(ctx, p)
}

// QueueList implements store.QueueStore.
func (m *Methods) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.Queue, error) {
	return m.reads.QueueList(ctx, p)
}

// QueueUpdate implements store.QueueStore.
func (m *Methods) QueueUpdate(ctx context.Context, p *store.QueueUpdateParams) (*store.Queue, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("updating queue: %w", err)
	}
	return guarded(m, ctx, "updating queue", p.Namespace, p.Idempotency, func(tx Tx) (*store.Queue, error) {
		return m.sql.QueueUpdate(tx, p)
	})
}

// QueueSetPaused implements store.QueueStore.
func (m *Methods) QueueSetPaused(ctx context.Context, p *store.QueueSetPausedParams) (*store.Queue, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pausing queue: %w", err)
	}
	return guarded(m, ctx, "pausing queue", p.Namespace, p.Idempotency, func(tx Tx) (*store.Queue, error) {
		return m.sql.QueueSetPaused(tx, p)
	})
}

// QueueCounts implements store.QueueCounter.
func (m *Methods) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	var out []store.QueueCount
	err := m.d.Read(ctx, func(q Querier) error {
		out = []store.QueueCount{} // a retried read starts again
		return q.Query(QueueCounts, nil, func(row Scanner) error {
			var c store.QueueCount
			if err := row.Scan(&c.Namespace, &c.Queue, &c.Status, &c.Count); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("counting runs by queue: %w", err)
	}
	return out, nil
}

// TokenCreate implements store.TokenStore.
func (m *Methods) TokenCreate(ctx context.Context, p *store.TokenCreateParams) (*store.Token, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating token: %w", err)
	}
	return written(m, ctx, "creating token", func(tx Tx) (*store.Token, error) { return m.sql.TokenCreate(tx, p) })
}

// TokenByHash implements store.TokenStore.
func (m *Methods) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	return m.reads.TokenByHash(ctx, p, m.d.Now())
}

// TokenBySubject implements store.TokenStore.
func (m *Methods) TokenBySubject(ctx context.Context, p *store.TokenBySubjectParams) (*store.Token, error) {
	return m.reads.TokenBySubject(ctx, p, m.d.Now())
}

// TokenList implements store.TokenStore.
func (m *Methods) TokenList(ctx context.Context) ([]*store.Token, error) {
	return m.reads.TokenList(ctx)
}

// TokenRevoke implements store.TokenStore.
func (m *Methods) TokenRevoke(ctx context.Context, p *store.TokenRevokeParams) (*store.Token, error) {
	return written(m, ctx, "revoking token", func(tx Tx) (*store.Token, error) { return m.sql.TokenRevoke(tx, p.Name) })
}

// TokenRotate implements store.TokenStore.
func (m *Methods) TokenRotate(ctx context.Context, p *store.TokenRotateParams) (*store.Token, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("rotating token: %w", err)
	}
	return written(m, ctx, "rotating token", func(tx Tx) (*store.Token, error) { return m.sql.TokenRotate(tx, p) })
}

// TokenTouch implements store.TokenStore. The last-used times are advisory: a
// crash may lose them without harm.
func (m *Methods) TokenTouch(ctx context.Context, p *store.TokenTouchParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("touching tokens: %w", err)
	}
	if len(p.Names) == 0 {
		return nil
	}
	return m.writeNoSync(ctx, "touching tokens", func(tx Tx) error { return m.sql.TokenTouch(tx, p.Names) })
}

// AuditAppend implements store.AuditStore.
func (m *Methods) AuditAppend(ctx context.Context, p *store.AuditAppendParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("appending audit entries: %w", err)
	}
	return m.write(ctx, "appending audit entries", func(tx Tx) error { return m.sql.AuditAppend(tx, p) })
}

// AuditList implements store.AuditStore.
func (m *Methods) AuditList(ctx context.Context, p *store.AuditListParams) (*store.AuditListResult, error) {
	return m.reads.AuditList(ctx, p)
}

// AuditNamespaces implements store.AuditStore.
func (m *Methods) AuditNamespaces(ctx context.Context) ([]string, error) {
	return m.reads.AuditNamespaces(ctx)
}

// AuditPurge implements store.AuditStore.
func (m *Methods) AuditPurge(ctx context.Context, p *store.AuditPurgeParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("purging audit entries: %w", err)
	}
	return m.purged(ctx, "purging audit entries", func(tx Tx) (int, error) { return m.sql.AuditPurge(tx, p) })
}

// SessionEnd implements store.SessionStore.
func (m *Methods) SessionEnd(ctx context.Context, p *store.SessionEndParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("ending session: %w", err)
	}
	return m.write(ctx, "ending session", func(tx Tx) error { return m.sql.SessionEnd(tx, p) })
}

// SessionEnded implements store.SessionStore.
func (m *Methods) SessionEnded(ctx context.Context, p *store.SessionEndedParams) (bool, error) {
	return m.reads.SessionEnded(ctx, p)
}

// SessionsPurge implements store.SessionStore.
func (m *Methods) SessionsPurge(ctx context.Context, p *store.SessionsPurgeParams) (int, error) {
	return m.purged(ctx, "purging ended sessions", func(tx Tx) (int, error) { return m.sql.SessionsPurge(tx, p.Limit) })
}

// SecretKey implements store.KeyStore.
func (m *Methods) SecretKey(ctx context.Context, p *store.SecretKeyParams) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("reading secret key: %w", err)
	}
	return written(m, ctx, "reading secret key", func(tx Tx) ([]byte, error) { return m.sql.SecretKey(tx, p) })
}

// IdempotencyGet implements store.IdempotencyStore.
func (m *Methods) IdempotencyGet(ctx context.Context, p *store.IdempotencyGetParams) (*store.IdempotencyEntry, error) {
	return m.reads.IdempotencyGet(ctx, p, m.d.Now())
}

// IdempotencyPurge implements store.IdempotencyStore.
func (m *Methods) IdempotencyPurge(ctx context.Context, p *store.IdempotencyPurgeParams) (int, error) {
	return m.purged(ctx, "purging idempotency keys", func(tx Tx) (int, error) { return m.sql.IdempotencyPurge(tx, p.Limit) })
}

// ApprovalGet implements store.Store.
func (m *Methods) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	return m.reads.ApprovalGet(ctx, p)
}

// ApprovalList implements store.Store.
func (m *Methods) ApprovalList(ctx context.Context, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	return m.reads.ApprovalList(ctx, p)
}

// ApprovalDecide implements store.Store.
func (m *Methods) ApprovalDecide(ctx context.Context, p *store.ApprovalDecideParams) (*store.Approval, error) {
	if err := ValidateDecide(p); err != nil {
		return nil, fmt.Errorf("deciding approval: %w", err)
	}
	return written(m, ctx, "deciding approval", func(tx Tx) (*store.Approval, error) { return m.sql.ApprovalDecide(tx, p) })
}

// ScheduleCreate implements store.ScheduleStore.
func (m *Methods) ScheduleCreate(ctx context.Context, p *store.ScheduleCreateParams) (*store.Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating schedule: %w", err)
	}
	return guarded(m, ctx, "creating schedule", p.Namespace, p.Idempotency, func(tx Tx) (*store.Schedule, error) {
		return m.sql.ScheduleCreate(tx, p)
	})
}

// ScheduleGet implements store.ScheduleStore.
func (m *Methods) ScheduleGet(ctx context.Context, p *store.ScheduleGetParams) (*store.Schedule, error) {
	return m.reads.ScheduleGet(ctx, p)
}

// ScheduleList implements store.ScheduleStore.
func (m *Methods) ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]*store.Schedule, error) {
	return m.reads.ScheduleList(ctx, p)
}

// ScheduleUpdate implements store.ScheduleStore.
func (m *Methods) ScheduleUpdate(ctx context.Context, p *store.ScheduleUpdateParams) (*store.Schedule, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("updating schedule: %w", err)
	}
	return guarded(m, ctx, "updating schedule", p.Namespace, p.Idempotency, func(tx Tx) (*store.Schedule, error) {
		return m.sql.ScheduleUpdate(tx, p)
	})
}

// SchedulePause implements store.ScheduleStore.
func (m *Methods) SchedulePause(ctx context.Context, p *store.SchedulePauseParams) (*store.Schedule, error) {
	if err := p.Idempotency.Validate(); err != nil {
		return nil, fmt.Errorf("pausing or resuming schedule: %w", err)
	}
	return guarded(m, ctx, "pausing or resuming schedule", p.Namespace, p.Idempotency, func(tx Tx) (*store.Schedule, error) {
		return m.sql.SchedulePause(tx, p)
	})
}

// ScheduleDelete implements store.ScheduleStore.
func (m *Methods) ScheduleDelete(ctx context.Context, p *store.ScheduleDeleteParams) error {
	if err := p.Idempotency.Validate(); err != nil {
		return fmt.Errorf("deleting schedule: %w", err)
	}
	return m.write(ctx, "deleting schedule", func(tx Tx) error {
		return m.sql.Guarded(tx, p.Namespace, p.Idempotency, func() (any, error) {
			return nil, m.sql.ScheduleDelete(tx, p)
		})
	})
}

// ScheduleFire implements store.ScheduleStore: the shared fence and cursor
// steps around the driver's run creation, in one write transaction.
func (m *Methods) ScheduleFire(ctx context.Context, p *store.ScheduleFireParams) (*store.ScheduleFireResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("firing schedule: %w", err)
	}
	return guarded(m, ctx, "firing schedule", p.Namespace, p.Idempotency, func(tx Tx) (*store.ScheduleFireResult, error) {
		res := &store.ScheduleFireResult{}
		if err := m.sql.ScheduleFireBegin(tx, p); err != nil {
			return nil, err
		}
		runID := ""
		for i, rp := range p.AllRuns() {
			runID = rp.ID
			run, created, err := m.fireRun(tx, rp)
			if err != nil {
				return nil, err
			}
			if i == 0 && p.Run != nil {
				res.Run, res.Created = run, created
			} else {
				res.Runs, res.RunsCreated = append(res.Runs, run), append(res.RunsCreated, created)
			}
		}
		if err := m.sql.ScheduleFireEnd(tx, p, runID); err != nil {
			return nil, err
		}
		return res, nil
	})
}

// fireRun creates a scheduled run, or finds it when it exists (a retried fire).
func (m *Methods) fireRun(tx Tx, p *store.RunCreateParams) (*store.Run, bool, error) {
	existing, err := m.sql.RunByRef(tx, p.Namespace, p.ID)
	switch {
	case err == nil:
		return existing, false, nil
	case !errors.Is(err, store.ErrRunNotFound):
		return nil, false, err
	}
	c, err := m.own.RunCreateIn(tx, p)
	if err != nil {
		return nil, false, err
	}
	return c.Run, true, nil
}

// SchedulerLeaseAcquire implements store.ScheduleStore.
func (m *Methods) SchedulerLeaseAcquire(ctx context.Context, p *store.SchedulerLeaseParams) (*store.SchedulerLease, error) {
	if err := p.Validate(true); err != nil {
		return nil, fmt.Errorf("acquiring scheduler lease: %w", err)
	}
	return written(m, ctx, "acquiring scheduler lease", func(tx Tx) (*store.SchedulerLease, error) {
		return m.sql.SchedulerLeaseAcquire(tx, p)
	})
}

// SchedulerLeaseRelease implements store.ScheduleStore.
func (m *Methods) SchedulerLeaseRelease(ctx context.Context, p *store.SchedulerLeaseParams) error {
	if err := p.Validate(false); err != nil {
		return fmt.Errorf("releasing scheduler lease: %w", err)
	}
	return m.write(ctx, "releasing scheduler lease", func(tx Tx) error { return m.sql.SchedulerLeaseRelease(tx, p) })
}

// runsCreate creates a batch of runs (under RunsCreate, apart.go): one
// transaction, one multi-row insert.
func (m *Methods) runsCreate(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	if err := m.d.Admit(); err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	return guarded(m, ctx, "creating runs", p.Namespace, p.Idempotency, func(tx Tx) (*store.RunsCreateResult, error) {
		return m.sql.RunsCreate(tx, p)
	})
}

// runDelete deletes a run (under RunDelete, apart.go).
func (m *Methods) runDelete(ctx context.Context, p *store.RunDeleteParams) (*store.Run, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("deleting run: %w", err)
	}
	var run *store.Run
	err := m.write(ctx, "deleting run", func(tx Tx) error {
		// The key's response renders nil, and no run sequence is kept with it:
		// the key outlives the run (store.RunDeleteParams).
		return m.sql.Guarded(tx, p.Namespace, p.Idempotency, func() (_ any, err error) {
			run, err = m.sql.RunDelete(tx, p)
			return nil, err
		})
	})
	if err != nil {
		return nil, err
	}
	return run, nil
}

// runsPurge deletes finished runs (under RunsPurge, apart.go): it finds them
// on the read pool and deletes those still expired in a write. A crash may
// lose a purge without harm: the next one deletes the same rows. A purge that
// another process's purge overtook deletes fewer than it found, and may so
// return fewer than p.Limit with more left: the purger's next pass takes them.
func (m *Methods) runsPurge(ctx context.Context, p *store.RunsPurgeParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("purging runs: %w", err)
	}
	var found []int64
	err := m.d.Read(ctx, func(q Querier) (err error) {
		found, err = m.sql.PurgeFind(q, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purging runs: %w", err)
	}
	if len(found) == 0 {
		return 0, nil
	}
	return m.purged(ctx, "purging runs", func(tx Tx) (int, error) { return m.sql.PurgeDelete(tx, p, found) })
}

// RunNamespaces implements store.RunDeleter.
func (m *Methods) RunNamespaces(ctx context.Context) ([]string, error) {
	var out []string
	err := m.d.Read(ctx, func(q Querier) (err error) {
		out, err = m.sql.RunNamespaces(q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return out, nil
}

// RunCounts implements store.RunCounter.
func (m *Methods) RunCounts(ctx context.Context, p *store.RunCountsParams) (*store.RunCountsResult, error) {
	return m.reads.RunCounts(ctx, p)
}

// runsGet reads runs by ID (under RunsGet, apart.go).
func (m *Methods) runsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	if err := store.ValidateRunsGet(p); err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	ids, err := m.sql.d.List(p.IDs)
	if err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	sts := make([]string, len(p.Statuses))
	for i, st := range p.Statuses {
		sts[i] = string(st)
	}
	stl, err := m.sql.d.List(sts)
	if err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	var runs []*store.Run
	err = m.d.Read(ctx, func(q Querier) (err error) {
		if len(p.IDs) == 0 { // after the closed check
			runs = []*store.Run{}
			return nil
		}
		runs, err = Runs(q, m.sql.d.RunsGet, p.Namespace, ids, stl)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	return runs, nil
}
