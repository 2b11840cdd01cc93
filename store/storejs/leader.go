package storejs

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

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
	var away leadersAway
	for {
		switch {
		case s.isLeading():
			away.check(s)
			if !s.renewLease(ctx) {
				s.log.Warn("storejs: the writer lease was taken over, or went unrenewed for most of its duration; following the log", "cluster", s.cfg.Name)
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
				s.log.Info("storejs: took the writer lease", "cluster", s.cfg.Name, "epoch", epoch)
				fol.stop()
				fol = nil
				if err := s.leadRenewing(ctx, epoch); err != nil {
					switch {
					case errors.Is(err, errStaleEpoch):
						s.log.Info("storejs: not taking over writing the log", "err", err)
					case ctx.Err() == nil:
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
		// The log's epochs only grow: a server whose lease's epoch is not above
		// every record's (its replica lagged when it took the lease, or the
		// lease was taken from it while it caught up) must not write. A
		// record of a lower epoch after a higher one is refused by every
		// replica as corrupt.
		s.mu.Lock()
		logEpoch := s.epoch
		s.mu.Unlock()
		if logEpoch >= epoch {
			return fmt.Errorf("%w: the log holds a record of epoch %d, this server's lease is of epoch %d", errStaleEpoch, logEpoch, epoch)
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
		// Bounded as the reading above: the run loop renews no lease while
		// it waits here.
		actx, acancel := context.WithTimeout(ctx, s.cfg.LeaseDuration)
		seq, err := s.jl.appendRecord(actx, data, last, epoch)
		acancel()
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

// leadRenewing is lead while the lease is renewed beside it: catching up
// with a long log, or waiting for the log's stream to elect its leader,
// took longer than the lease, which another server then took (a needless
// change of writer, and a second wait). A renewal that finds the lease taken
// stops the takeover.
func (s *Store) leadRenewing(ctx context.Context, epoch uint64) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.cfg.LeaseDuration / 4)
		defer tick.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			if !s.renewLease(lctx) && lctx.Err() == nil {
				close(lost)
				cancel()
				return
			}
		}
	}()
	err := s.lead(lctx, epoch)
	cancel()
	<-done // the lease is the run loop's again
	select {
	case <-lost:
		if err != nil {
			return fmt.Errorf("the writer lease was taken over while taking over: %w", err)
		}
		// lead finished first: the run loop's next renewal finds it out.
	default:
	}
	return err
}

// renewLease renews the held lease, waiting at most half its duration.
func (s *Store) renewLease(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseDuration/2)
	defer cancel()
	return s.lease.renew(rctx)
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
			// Making a new consumer goes through JetStream's meta leader,
			// which may be in an election: catch up meanwhile by asking the
			// stream's leader for each record, then try again.
			if err := s.followGets(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("storejs: catching up with the log by its records' sequences", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(followRetry):
			}
		}
	}()
	return f
}

// followRetry is how long a follower waits before it reads the log with a
// new consumer after its reader failed.
const followRetry = 200 * time.Millisecond

// followGets applies the log's records up to its end as of now by asking the
// stream's leader for each (no consumer), within a lease's time.
func (s *Store) followGets(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseDuration)
	defer cancel()
	last, err := s.jl.last(gctx)
	if err == nil {
		err = s.applyByGets(gctx, last)
	}
	if errors.Is(err, errNoMessage) {
		return nil // compacted away, or not on the replica that answered: the consumer's
	}
	return err
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

// leadersAway keeps the JetStream leaders of the log's stream and of the
// lease's bucket off the server that writes the log, when that server embeds
// a NATS server of an R3 cluster. JetStream elects a group's new leader 4 to
// 9 s after losing one, so a SIGKILLed writer that also led the log's stream
// or the lease's bucket left no server able to write for that long, on top of
// the lease's time (failovers of 6-13 s in the three-process test); with
// those leaders elsewhere the next writer takes over within the lease's time.
//
// It hands each group's leadership to a chosen replica (successor): one
// online, caught up, heard from within leadersAwayFresh, and on a server
// connected to this one by a route. Left to choose, JetStream hands it to any
// replica it heard from within three heartbeats (3 s), and a server SIGKILLed
// a moment ago still is one: handed to it, the group had no leader until an
// election, 4 to 9 s later (failovers of 8-13 s in the three-process test,
// where the new writer asked a second after its predecessor's kill). It asks
// at most every leadersAwayEvery for each group, and at every tick while no
// replica can take the leadership.
type leadersAway struct {
	last map[string]time.Time // by stream: the last hand-over asked
}

// leadersAwayEvery is a variable for tests.
var leadersAwayEvery = 5 * time.Second

// leadersAwayFresh is how recently a replica must have been heard from to
// take a group's leadership: JetStream's heartbeat is a second.
const leadersAwayFresh = 1500 * time.Millisecond

func (a *leadersAway) check(s *Store) {
	if s.srv == nil || s.cfg.Replicas < 2 || !s.srv.JetStreamIsClustered() {
		return
	}
	if a.last == nil {
		a.last = make(map[string]time.Time)
	}
	acc := s.srv.GlobalAccount().GetName()
	for _, stream := range []string{streamName(s.cfg.Name), "KV_" + leaseBucket(s.cfg.Name)} {
		if !s.srv.JetStreamIsStreamLeader(acc, stream) || time.Since(a.last[stream]) < leadersAwayEvery {
			continue
		}
		to, why := s.successor(stream)
		if to == "" {
			s.log.Debug("storejs: the writer's NATS server keeps a stream's leadership for now", "stream", stream, "why", why)
			continue
		}
		a.last[stream] = time.Now()
		if err := s.handOver(stream, to); err != nil {
			s.log.Warn("storejs: asking the writer's NATS server to hand a stream's leadership over", "stream", stream, "to", to, "err", err)
		} else {
			s.log.Info("storejs: the writer's NATS server hands a stream's leadership over", "stream", stream, "to", to)
		}
	}
}

// notLeader starts successor's why when this server's view of the group is
// not the leader's: it is asked again.
const notLeader = "this server does not lead it"

// successor names the replica of stream's group to hand its leadership to
// (see leadersAway), the one heard from last; or "" and why none can take
// it. The stream's leader (this server) answers from its own state.
func (s *Store) successor(stream string) (name, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(500*time.Millisecond, s.cfg.LeaseDuration/4))
	defer cancel()
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return "", "reading its state: " + err.Error()
	}
	rz, err := s.srv.Routez(nil)
	if err != nil {
		return "", "reading the routes: " + err.Error()
	}
	routed := make(map[string]bool)
	for _, r := range rz.Routes {
		routed[r.RemoteName] = true
	}
	var best *jetstream.PeerInfo
	var whys []string
	if ci := st.CachedInfo().Cluster; ci != nil {
		if ci.Leader != s.srv.Name() {
			return "", notLeader + " (" + ci.Leader + " does)"
		}
		for _, p := range ci.Replicas {
			switch {
			case p.Name == s.srv.Name():
				// Another replica answered (it lists the others): its view
				// of the routes and of who is current is not this one's.
				return "", notLeader + " (another replica answered)"
			case !routed[p.Name]:
				whys = append(whys, p.Name+" has no route to this server")
			case p.Offline:
				whys = append(whys, p.Name+" is offline")
			case !p.Current:
				whys = append(whys, p.Name+" is behind")
			case p.Active > leadersAwayFresh:
				whys = append(whys, fmt.Sprintf("%s was last heard from %s ago", p.Name, p.Active.Round(time.Millisecond)))
			case best == nil || p.Active < best.Active:
				best = p
			}
		}
	}
	if best == nil {
		if len(whys) == 0 {
			return "", "it has no other replica"
		}
		return "", strings.Join(whys, "; ")
	}
	return best.Name, ""
}

// handOver asks stream's leader to hand its leadership to the replica on
// server to, through JetStream's API (the embedded server's own step-down
// lets JetStream choose).
func (s *Store) handOver(stream, to string) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(500*time.Millisecond, s.cfg.LeaseDuration/4))
	defer cancel()
	req, err := json.Marshal(server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: to}})
	if err != nil {
		return err
	}
	msg, err := s.nc.RequestWithContext(ctx, fmt.Sprintf(server.JSApiStreamLeaderStepDownT, stream), req)
	if err != nil {
		return err
	}
	var resp server.JSApiStreamLeaderStepDownResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if !resp.Success {
		return errors.New("the stream's leader did not step down")
	}
	return nil
}
