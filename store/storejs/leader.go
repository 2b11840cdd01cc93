package storejs

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// run owns the server's role: it follows the log, takes the lease when it
// is free or lapsed and then writes, renews it while writing, and steps down
// when deposed. It ends when the store closes.
func (s *Store) run() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	snapDone := make(chan struct{})
	go func() {
		defer close(snapDone)
		s.snapshotLoop(ctx)
	}()
	defer func() { cancel(); <-snapDone }()
	tick := time.NewTicker(s.cfg.LeaseDuration / 4)
	defer tick.Stop()
	fol := s.follow()
	var stopServing func()
	for {
		switch {
		case s.isLeading():
			rctx, rcancel := context.WithTimeout(ctx, s.cfg.LeaseDuration/2)
			renewed := s.lease.renew(rctx)
			rcancel()
			if !renewed {
				s.log.Warn("storejs: the writer lease was taken over", "cluster", s.cfg.Name)
				s.stepDown(stopServing)
				stopServing, fol = nil, s.follow()
			}
		case s.read(ctx) == nil:
			s.mu.Lock()
			minEpoch := s.epoch
			s.mu.Unlock()
			// A lease bucket electing its leader answers no update: try again a
			// tick later rather than after JetStream's 5 s API timeout.
			actx, acancel := context.WithTimeout(ctx, s.cfg.LeaseDuration)
			epoch, ok, err := s.lease.acquire(actx, minEpoch)
			acancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("storejs: reading the writer lease", "err", err)
			}
			if ok {
				fol.stop()
				fol = nil
				if err := s.lead(ctx, epoch); err != nil {
					if ctx.Err() == nil {
						s.log.Error("storejs: taking over writing the log", "err", err)
					}
					s.lease.release(context.WithoutCancel(ctx))
					fol = s.follow()
				} else {
					stopServing = s.serve()
				}
			}
		}
		select {
		case <-s.quit:
			if fol != nil {
				fol.stop()
			}
			if s.isLeading() {
				s.stepDown(stopServing)
				lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
				s.lease.release(lctx)
				lcancel()
			}
			return
		case <-s.demoted:
			if s.isLeading() || fol == nil {
				s.stepDown(stopServing)
				s.lease.holding = false
				stopServing, fol = nil, s.follow()
			}
		case reply := <-s.takeover:
			if s.isLeading() {
				reply <- nil
				break
			}
			s.mu.Lock()
			minEpoch := s.epoch
			s.mu.Unlock()
			epoch, err := s.lease.force(ctx, minEpoch)
			if err == nil {
				fol.stop()
				if err = s.lead(ctx, epoch); err == nil {
					stopServing, fol = s.serve(), nil
				} else {
					fol = s.follow()
				}
			}
			reply <- err
		case <-tick.C:
		}
	}
}

// TakeOver makes this server the log's writer now, whether or not the
// lease of the one writing lapsed (an operator's switch-over; the tests'
// forced takeover). The deposed writer's next batch is refused.
func (s *Store) TakeOver(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case s.takeover <- reply:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return store.ErrClosed
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lead makes this server the log's writer in epoch: it applies the log to
// its end, appends the epoch's first record after it, and attaches the log
// to the replica's writer. A record another writer appends meanwhile makes
// it start over.
func (s *Store) lead(ctx context.Context, epoch uint64) error {
	for attempt := 0; ; attempt++ {
		// A stream electing its leader, or a cluster its meta leader (which
		// creates the consumer catchUp reads with), answers nothing: give up
		// after a lease's time, and the owner tries again a tick later (from
		// where catchUp got to). Waiting out JetStream's 5 s API timeout
		// instead made takeovers end up to 5 s after the elections: SIGKILL
		// failovers of 11-13 s where the elections took 6-8.
		lctx, lcancel := context.WithTimeout(ctx, s.cfg.LeaseDuration)
		last, err := s.jl.last(lctx)
		if err == nil {
			err = s.catchUp(lctx, last)
		}
		lcancel()
		if err != nil {
			return err
		}
		batch, err := s.genesis(ctx, last)
		if err != nil {
			return err
		}
		s.mu.Lock()
		prev := s.hash
		s.mu.Unlock()
		data, err := encodeRecord(&record{kind: kindEpoch, schema: s.schema, epoch: epoch, prev: prev, batch: *batch})
		if err != nil {
			return err
		}
		seq, err := s.jl.appendRecord(ctx, data, last, epoch)
		if errors.Is(err, errFenced) && attempt < 10 {
			continue // a deposed writer's last record; apply it and try again
		}
		if err != nil {
			return err
		}
		st := replicaState{epoch: epoch, hash: hashOf(data)}
		if err := s.rep.ApplyLog(ctx, batch, storesqlite.LogPosition{Seq: seq, State: st.encode()}); err != nil {
			return s.fail(fmt.Errorf("applying the epoch record at %d: %w", seq, err))
		}
		s.advance(seq, st)
		if err := s.rep.AttachLog(ctx, writerLog{s}); err != nil {
			return err
		}
		s.mu.Lock()
		s.leading = true
		s.mu.Unlock()
		s.log.Info("storejs: writing the log", "cluster", s.cfg.Name, "epoch", epoch, "sequence", seq)
		return nil
	}
}

// genesis is what the epoch record that starts an empty log carries: the
// times of the rows the replica's migrations wrote with their own clock, so
// that every replica rebuilt from the log has the writer's.
func (s *Store) genesis(ctx context.Context, last uint64) (*storesqlite.LogBatch, error) {
	if last > 0 {
		return &storesqlite.LogBatch{}, nil
	}
	ns, err := s.rep.NamespaceGet(ctx, &store.NamespaceGetParams{Name: "default"})
	if err != nil {
		return nil, fmt.Errorf("reading the default namespace: %w", err)
	}
	return &storesqlite.LogBatch{Statements: []storesqlite.Statement{{
		Query: `UPDATE namespaces SET created_at = ?, updated_at = ? WHERE name = 'default'`,
		Args:  []driver.Value{ns.CreatedAt.UnixNano(), ns.UpdatedAt.UnixNano()},
	}}}, nil
}

// stepDown makes this server a follower: its replica's writer refuses
// writes again and forwarded writes go elsewhere.
func (s *Store) stepDown(stopServing func()) {
	s.mu.Lock()
	s.leading = false
	s.mu.Unlock()
	s.rep.Detach()
	if stopServing != nil {
		stopServing()
	}
}

// demote is called by the writer when the log refused its batch or its
// outcome is unknown: the server stops writing at once, and its owner makes
// it follow the log from its replica's position.
func (s *Store) demote() {
	s.mu.Lock()
	s.leading = false
	s.mu.Unlock()
	s.rep.Detach()
	select {
	case s.demoted <- struct{}{}:
	default:
	}
}

// writerLog is the log as the replica's writer sees it.
type writerLog struct{ s *Store }

// Append implements storesqlite.CommitLog: one record per batch, fenced on
// the sequence the replica reached.
func (w writerLog) Append(ctx context.Context, b *storesqlite.LogBatch) (storesqlite.LogPosition, error) {
	s := w.s
	s.mu.Lock()
	leading, epoch, prev, after := s.leading, s.epoch, s.hash, s.head
	s.mu.Unlock()
	if !leading {
		return storesqlite.LogPosition{}, errFenced
	}
	data, err := encodeRecord(&record{kind: kindBatch, schema: s.schema, epoch: epoch, prev: prev, batch: *b})
	if err != nil {
		return storesqlite.LogPosition{}, fmt.Errorf("storejs: %w", err)
	}
	seq, err := s.jl.appendRecord(ctx, data, after, epoch)
	if err != nil {
		if errors.Is(err, errFenced) || errors.Is(err, errUnknownOutcome) {
			s.demote()
		}
		return storesqlite.LogPosition{}, err
	}
	st := replicaState{epoch: epoch, hash: hashOf(data)}
	return storesqlite.LogPosition{Seq: seq, State: st.encode()}, nil
}

// Committed implements storesqlite.CommitLog.
func (w writerLog) Committed(pos storesqlite.LogPosition, err error) {
	if err != nil {
		w.s.log.Error("storejs: a batch in the log did not commit in the replica; following the log again", "sequence", pos.Seq, "err", err)
		w.s.demote()
		return
	}
	st, _ := decodeState(pos.State)
	w.s.advance(pos.Seq, st)
}

// follower applies the log's records to the replica as they come.
type follower struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (f *follower) stop() {
	if f != nil {
		f.cancel()
		<-f.done
	}
}

func (s *Store) follow() *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for ctx.Err() == nil && s.read(ctx) == nil {
			err := s.followOnce(ctx)
			if ctx.Err() != nil || errors.Is(err, errCorrupt) {
				return
			}
			if errors.Is(err, errBehind) {
				s.behind(err)
				return
			}
			s.log.Warn("storejs: following the log", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return f
}

func (s *Store) followOnce(ctx context.Context) error {
	s.mu.Lock()
	from := s.head + 1
	s.mu.Unlock()
	r, err := s.jl.readFrom(ctx, from)
	if err != nil {
		return err
	}
	defer r.stop()
	for {
		e, err := r.nextRecord(ctx, 0)
		if err != nil {
			return err
		}
		if err := s.apply(ctx, e); err != nil {
			return err
		}
	}
}
