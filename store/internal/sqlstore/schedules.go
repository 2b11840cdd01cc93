package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// scheduleCols are the columns scanSchedule reads, in order.
const scheduleCols = `namespace, name, workflow, queue, input, cron, time_zone, overlap,
	catchup_window, paused, last_fire_at, last_run_id, buffered_at, created_at, updated_at`

// scheduleQueries are the statements of the schedule store (store.ScheduleStore).
type scheduleQueries struct {
	insert, get, list, listAll, update, pause, del string
	leaseGet, leaseInsert, leaseSet, leaseRelease  string
	fence, cursor, lastRun, buffered               string
}

func newScheduleQueries(r func(string) string) scheduleQueries {
	const ret = ` RETURNING ` + scheduleCols
	return scheduleQueries{
		insert: r(`INSERT INTO schedules (namespace, name, workflow, queue, input, cron, time_zone,
	overlap, catchup_window, paused, last_fire_at, created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $11) ON CONFLICT DO NOTHING` + ret),
		get:     r(`SELECT ` + scheduleCols + ` FROM schedules WHERE namespace = $1 AND name = $2`),
		list:    r(`SELECT ` + scheduleCols + ` FROM schedules WHERE namespace = $1 ORDER BY name`),
		listAll: r(`SELECT ` + scheduleCols + ` FROM schedules ORDER BY namespace, name`),
		update: r(`UPDATE schedules SET workflow = $3, queue = $4, input = $5, cron = $6, time_zone = $7,
	overlap = $8, catchup_window = $9, last_fire_at = $10, buffered_at = NULL, updated_at = $10
	WHERE namespace = $1 AND name = $2` + ret),
		// pause changes nothing unless the schedule is in the other state; the
		// caller tells "absent" from "already so" by reading it.
		pause: r(`UPDATE schedules SET paused = $3, updated_at = $4,
	last_fire_at = CASE WHEN $3 THEN last_fire_at ELSE $4 END,
	buffered_at = CASE WHEN $3 THEN buffered_at ELSE NULL END
	WHERE namespace = $1 AND name = $2 AND paused <> $3` + ret),
		del:         r(`DELETE FROM schedules WHERE namespace = $1 AND name = $2`),
		leaseGet:    r(`SELECT owner, epoch, expires_at FROM scheduler_lease WHERE id = 1`),
		leaseInsert: r(`INSERT INTO scheduler_lease (id, owner, epoch, expires_at) VALUES (1, $1, 1, $2) ON CONFLICT DO NOTHING`),
		// leaseSet hands the lease to $1 with epoch $2 until $3, if it is still
		// at epoch $4 (compare and set: two contenders cannot both win).
		leaseSet:     r(`UPDATE scheduler_lease SET owner = $1, epoch = $2, expires_at = $3 WHERE id = 1 AND epoch = $4`),
		leaseRelease: r(`UPDATE scheduler_lease SET expires_at = $3 WHERE id = 1 AND owner = $1 AND epoch = $2 AND expires_at > $3`),
		// fence holds when epoch $1 is the lease's and unexpired at $2. The
		// UPDATE takes the row's lock, so a concurrent change of hands waits for
		// (or is waited for by) the fire's transaction.
		fence:    r(`UPDATE scheduler_lease SET epoch = epoch WHERE id = 1 AND epoch = $1 AND expires_at > $2`),
		cursor:   r(`UPDATE schedules SET last_fire_at = $3 WHERE namespace = $1 AND name = $2 AND last_fire_at < $3`),
		lastRun:  r(`UPDATE schedules SET last_run_id = $3 WHERE namespace = $1 AND name = $2`),
		buffered: r(`UPDATE schedules SET buffered_at = $3 WHERE namespace = $1 AND name = $2`),
	}
}

func scanSchedule(sc Scanner) (*store.Schedule, error) {
	var (
		s                          store.Schedule
		overlap                    string
		window                     int64
		last, buffered, created, u Time
	)
	err := sc.Scan(&s.Namespace, &s.Name, &s.Workflow, &s.Queue, &s.Input, &s.Cron, &s.TimeZone,
		&overlap, &window, &s.Paused, &last, &s.LastRunID, &buffered, &created, &u)
	if err != nil {
		return nil, err
	}
	s.Overlap, s.CatchupWindow = store.Overlap(overlap), time.Duration(window)
	s.LastFireAt, s.BufferedAt, s.CreatedAt, s.UpdatedAt = last.T, buffered.Ptr(), created.T, u.T
	return &s, nil
}

func (s *SQL) scheduleRow(row Scanner, namespace, name string) (*store.Schedule, error) {
	sc, err := scanSchedule(row)
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrScheduleNotFound, name, namespace)
	}
	return sc, err
}

// ScheduleCreate stores a schedule; p must be valid.
func (s *SQL) ScheduleCreate(tx Tx, p *store.ScheduleCreateParams) (*store.Schedule, error) {
	sp := &p.Spec
	sc, err := scanSchedule(tx.QueryRow(s.sch.insert, p.Namespace, p.Name, sp.Workflow, sp.Queue, sp.Input,
		sp.Cron, sp.TimeZone, string(sp.Overlap), int64(sp.CatchupWindow), p.Paused, s.d.Time(tx.Now())))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrScheduleExists, p.Name, p.Namespace)
	}
	return sc, err
}

// ScheduleGet reads one schedule.
func (s *SQL) ScheduleGet(q Querier, namespace, name string) (*store.Schedule, error) {
	return s.scheduleRow(q.QueryRow(s.sch.get, namespace, name), namespace, name)
}

// ScheduleList reads a namespace's schedules (every one with namespace "").
func (s *SQL) ScheduleList(q Querier, namespace string) ([]*store.Schedule, error) {
	query, args := s.sch.list, []any{namespace}
	if namespace == "" {
		query, args = s.sch.listAll, nil
	}
	out := []*store.Schedule{}
	err := q.Query(query, args, func(row Scanner) error {
		sc, err := scanSchedule(row)
		if err == nil {
			out = append(out, sc)
		}
		return err
	})
	return out, err
}

// ScheduleUpdate replaces a schedule's spec; p must be valid.
func (s *SQL) ScheduleUpdate(tx Tx, p *store.ScheduleUpdateParams) (*store.Schedule, error) {
	sp := &p.Spec
	return s.scheduleRow(tx.QueryRow(s.sch.update, p.Namespace, p.Name, sp.Workflow, sp.Queue, sp.Input,
		sp.Cron, sp.TimeZone, string(sp.Overlap), int64(sp.CatchupWindow), s.d.Time(tx.Now())), p.Namespace, p.Name)
}

// SchedulePause pauses or resumes a schedule.
func (s *SQL) SchedulePause(tx Tx, p *store.SchedulePauseParams) (*store.Schedule, error) {
	sc, err := scanSchedule(tx.QueryRow(s.sch.pause, p.Namespace, p.Name, p.Paused, s.d.Time(tx.Now())))
	if !errors.Is(err, ErrNoRows) {
		return sc, err
	}
	if _, err := s.ScheduleGet(tx, p.Namespace, p.Name); err != nil {
		return nil, err
	}
	if p.Paused {
		return nil, fmt.Errorf("%w: %q", store.ErrSchedulePaused, p.Name)
	}
	return nil, fmt.Errorf("%w: %q", store.ErrScheduleNotPaused, p.Name)
}

// ScheduleDelete deletes a schedule.
func (s *SQL) ScheduleDelete(tx Tx, p *store.ScheduleDeleteParams) error {
	n, err := tx.Exec(s.sch.del, p.Namespace, p.Name)
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: %q in namespace %q", store.ErrScheduleNotFound, p.Name, p.Namespace)
	}
	return err
}

// SchedulerLeaseAcquire takes or renews the scheduler lease; p must be valid.
func (s *SQL) SchedulerLeaseAcquire(tx Tx, p *store.SchedulerLeaseParams) (*store.SchedulerLease, error) {
	now := tx.Now()
	until := now.Add(p.Duration)
	n, err := tx.Exec(s.sch.leaseInsert, p.Owner, s.d.Time(until))
	if err != nil {
		return nil, err
	}
	if n == 1 {
		return &store.SchedulerLease{Owner: p.Owner, Epoch: 1, ExpiresAt: until.UTC(), Held: true}, nil
	}
	var (
		cur     store.SchedulerLease
		expires Time
	)
	if err := tx.QueryRow(s.sch.leaseGet).Scan(&cur.Owner, &cur.Epoch, &expires); err != nil {
		return nil, err
	}
	cur.ExpiresAt = expires.T
	live := cur.ExpiresAt.After(now)
	epoch := cur.Epoch
	switch {
	case live && cur.Owner == p.Owner && cur.Epoch == p.Epoch: // renew
	case !live: // take, with the next epoch
		epoch++
	default:
		return &cur, nil
	}
	n, err = tx.Exec(s.sch.leaseSet, p.Owner, epoch, s.d.Time(until), cur.Epoch)
	if err != nil {
		return nil, err
	}
	if n == 0 { // another contender won meanwhile
		return &cur, nil
	}
	return &store.SchedulerLease{Owner: p.Owner, Epoch: epoch, ExpiresAt: until.UTC(), Held: true}, nil
}

// SchedulerLeaseRelease ends the lease now if p's owner holds it with p's epoch.
func (s *SQL) SchedulerLeaseRelease(tx Tx, p *store.SchedulerLeaseParams) error {
	_, err := tx.Exec(s.sch.leaseRelease, p.Owner, p.Epoch, s.d.Time(tx.Now()))
	return err
}

// ScheduleFireBegin is the first part of ScheduleFire, before the driver creates
// the run: it checks the fence (unless p.Epoch is 0), that the schedule exists
// (and, for a fenced fire, is not paused), and cancels p.CancelRunID if it is
// still active.
func (s *SQL) ScheduleFireBegin(tx Tx, p *store.ScheduleFireParams) error {
	if p.Epoch > 0 {
		n, err := tx.Exec(s.sch.fence, p.Epoch, s.d.Time(tx.Now()))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: epoch %d", store.ErrNotLeader, p.Epoch)
		}
	}
	sc, err := s.ScheduleGet(tx, p.Namespace, p.Name)
	if err != nil {
		return err
	}
	if p.Epoch > 0 && sc.Paused {
		// Paused after the leader read it: the tick is not the leader's to fire.
		return fmt.Errorf("%w: %q", store.ErrSchedulePaused, p.Name)
	}
	if p.CancelRunID != "" {
		run, err := s.RunByRef(tx, p.Namespace, p.CancelRunID)
		switch {
		case errors.Is(err, store.ErrRunNotFound):
		case err != nil:
			return err
		case !run.Status.Terminal():
			if _, err := s.CancelRun(tx, run); err != nil {
				return fmt.Errorf("cancelling previous run %q: %w", run.ID, err)
			}
		}
	}
	return nil
}

// ScheduleFireEnd is the last part of ScheduleFire, after the driver created the
// run (runID, "" for none): it records the run and moves the cursor and buffered
// tick.
func (s *SQL) ScheduleFireEnd(tx Tx, p *store.ScheduleFireParams, runID string) error {
	if runID != "" {
		if _, err := tx.Exec(s.sch.lastRun, p.Namespace, p.Name, runID); err != nil {
			return err
		}
	}
	if p.Cursor != nil {
		if _, err := tx.Exec(s.sch.cursor, p.Namespace, p.Name, s.d.Time(*p.Cursor)); err != nil {
			return err
		}
	}
	if p.SetBuffered {
		if _, err := tx.Exec(s.sch.buffered, p.Namespace, p.Name, s.timePtr(p.Buffered)); err != nil {
			return err
		}
	}
	return nil
}

// ScheduleGet implements store.ScheduleStore.
func (r Reads) ScheduleGet(ctx context.Context, p *store.ScheduleGetParams) (*store.Schedule, error) {
	var sc *store.Schedule
	err := r.read(ctx, "getting schedule", func(q Querier) (err error) {
		sc, err = r.sql.ScheduleGet(q, p.Namespace, p.Name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// ScheduleList implements store.ScheduleStore.
func (r Reads) ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]*store.Schedule, error) {
	var out []*store.Schedule
	err := r.read(ctx, "listing schedules", func(q Querier) (err error) {
		out, err = r.sql.ScheduleList(q, p.Namespace)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
