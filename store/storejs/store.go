package storejs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// Store is a store.Store whose record is a JetStream stream; see the package
// documentation. Create it with Open.
type Store struct {
	cfg    Config
	log    *slog.Logger
	rep    *storesqlite.Store
	srv    *server.Server // the embedded server, or nil
	nc     *nats.Conn
	jl     *jsLog
	js     jetstream.JetStream
	lease  *lease
	schema uint64
	fwd    forwarder

	mu       sync.Mutex
	leading  bool
	epoch    uint64        // of the last record applied or written
	head     uint64        // the log sequence the replica reached
	hash     [32]byte      // of the last record applied or written
	advanced chan struct{} // closed and replaced when head moves
	newEpoch chan struct{} // closed and replaced when epoch changes
	broken   error         // why the replica stopped following the log
	demoted  chan struct{} // signals the owner that the writer lost the log
	takeover chan chan error

	snapMu   sync.Mutex // one snapshot at a time
	bucketMu sync.Mutex
	snaps    jetstream.ObjectStore // the snapshot bucket, once opened (bucket)
	restored uint64                // the sequence of the snapshot Open restored (0: none)

	// beforeApply, when set (tests), is called before a followed record is
	// applied, with its sequence.
	beforeApply atomic.Pointer[func(seq uint64)]

	closeOnce sync.Once
	closeErr  error
	quit      chan struct{}
	done      chan struct{}
}

// forwarder sends a write to the leader (package internal/forward).
type forwarder interface {
	Call(ctx context.Context, method string, in, out any) error
}

// Open opens the replica at cfg's path, connects to (or starts) the NATS
// servers, applies the log to the replica up to its end, and starts following
// it; the server whose lease it is writes. It returns once the replica has
// caught up with the log as it was at the call.
func Open(ctx context.Context, cfg Config) (_ *Store, err error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w: %w", store.ErrInvalidParams, err)
	}
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg, log: cfg.Logger, advanced: make(chan struct{}), newEpoch: make(chan struct{}), demoted: make(chan struct{}, 1), takeover: make(chan chan error),
		quit: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			close(s.done)
			s.closeAll()
		}
	}()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	if s.nc, s.srv, err = connect(ctx, cfg); err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	if s.jl, err = retryOpen(ctx, func() (*jsLog, error) { return openLog(ctx, js, cfg.Name, cfg.Replicas, s.log) }); err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	kv, err := retryOpen(ctx, func() (jetstream.KeyValue, error) { return openLease(ctx, js, cfg.Name, cfg.Replicas) })
	if err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	s.lease = &lease{kv: kv, owner: owner(), ttl: cfg.LeaseDuration}
	s.js = js
	if err := s.openReplica(ctx); err != nil {
		return nil, fmt.Errorf("opening jetstream store: the replica: %w", err)
	}
	if err := s.rep.Follow(ctx); err != nil {
		return nil, fmt.Errorf("opening jetstream store: the replica: %w", err)
	}
	if s.schema, err = s.rep.SchemaVersion(ctx); err != nil {
		return nil, fmt.Errorf("opening jetstream store: the replica: %w", err)
	}
	pos, err := s.rep.LogPosition(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	st, err := decodeState(pos.State)
	if err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	s.head, s.epoch, s.hash = pos.Seq, st.epoch, st.hash
	// Reading the log needs a consumer, which a cluster creates only while
	// it has a meta leader: a server restarted right after another was
	// killed waits for the election (seconds) instead of failing to start,
	// and a reader whose consumer's server stopped reads again. catchUp
	// resumes where a failed attempt stopped.
	if _, err := retryOpen(ctx, func() (struct{}, error) {
		last, err := s.jl.last(ctx)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, s.catchUp(ctx, last)
	}); err != nil {
		return nil, fmt.Errorf("opening jetstream store: %w", err)
	}
	s.fwd = newForwarder(s)
	go s.run()
	return s, nil
}

// retryOpen retries f while a JetStream cluster is still electing its
// leaders (a cluster's servers starting together), for up to a minute.
func retryOpen[T any](ctx context.Context, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil ||
			!(errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrTimeout) ||
				errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) ||
				errors.Is(err, jetstream.ErrNoStreamResponse) || isClusterNotReady(err) || readerLost(err)) {
			return v, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readerLost: a reader's consumer stopped answering or was deleted (its
// server stopped), or skipped a message: reading again from the replica's
// position goes on.
func readerLost(err error) bool {
	return errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, errDelivery)
}

func isClusterNotReady(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == 10008 /* cluster not available */ ||
		apiErr.ErrorCode == 10005 /* insufficient resources */ || apiErr.Code == 503)
}

func owner() string {
	host, _ := os.Hostname()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// catchUp applies the log's records up to sequence last.
func (s *Store) catchUp(ctx context.Context, last uint64) error {
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	if head > last {
		return fmt.Errorf("the replica %s is at log sequence %d but stream %s ends at %d: the stream was replaced; delete the replica to rebuild it",
			s.cfg.replicaPath(), head, streamName(s.cfg.Name), last)
	}
	if head == last {
		return nil
	}
	if last-head <= catchUpByGets {
		// A few records (a follower taking the writing over): asked of the
		// stream's leader one by one, with no consumer (getSource).
		if err := s.applyByGets(ctx, last); !errors.Is(err, errNoMessage) {
			return err
		}
		head = s.appliedSeq()
	}
	r, err := s.jl.readFrom(ctx, head+1)
	if err != nil {
		return err
	}
	return s.applyUpTo(ctx, r, last)
}

// applyByGets applies the records after the replica's head up to sequence
// last by asking the stream's leader for each (getSource: no consumer); it
// fails with errNoMessage when one is not there (compacted away, or not yet
// on the replica that answered).
func (s *Store) applyByGets(ctx context.Context, last uint64) error {
	head := s.appliedSeq()
	if last <= head {
		return nil
	}
	return s.applyUpTo(ctx, s.jl.readByGets(head+1), last)
}

// catchUpByGets is how many messages behind the log's end a replica catches
// up by asking for each (more are read with a consumer, 512 at a time).
const catchUpByGets = 256

// applyUpTo applies r's records up to sequence last, and stops r.
func (s *Store) applyUpTo(ctx context.Context, r *logReader, last uint64) error {
	defer r.stop()
	for {
		e, err := r.nextRecord(ctx, last)
		if errors.Is(err, errTail) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.apply(ctx, e); err != nil {
			return err
		}
	}
}

// apply checks one record against the replica's chain and applies it.
func (s *Store) apply(ctx context.Context, e entry) error {
	rec, err := decodeRecord(e.data)
	if err == nil {
		err = s.check(rec, e.seq)
	}
	if errors.Is(err, errApplied) {
		return nil
	}
	if err != nil {
		return s.fail(fmt.Errorf("log record at sequence %d of stream %s: %w", e.seq, streamName(s.cfg.Name), err))
	}
	if f := s.beforeApply.Load(); f != nil {
		(*f)(e.seq)
	}
	st := replicaState{epoch: rec.epoch, hash: hashOf(e.data)}
	err = s.rep.ApplyLog(ctx, &rec.batch, storesqlite.LogPosition{Seq: e.seq, State: st.encode()})
	switch {
	case errors.Is(err, storesqlite.ErrApplied):
		// The replica holds it already: this server's writer committed it
		// after the check above (its Committed advanced the head), or an
		// earlier apply of it committed after its caller stopped waiting
		// (its context ended while the replica's writer ran it), which left
		// the head behind the replica. The replica's position is the truth.
		return s.syncHead(ctx)
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return s.fail(fmt.Errorf("applying the log record at sequence %d: %w", e.seq, err))
	}
	s.advance(e.seq, st)
	return nil
}

// errApplied: a record the replica holds already. A reader started while
// this server wrote the log (a demoted writer's follower, whose last
// batch's append had gone out and committed after the reader began) meets
// the records its own writer committed.
var errApplied = errors.New("applied already")

func (s *Store) check(rec *record, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case seq <= s.head:
		return errApplied
	case rec.prev != s.hash:
		return fmt.Errorf("%w: it does not follow the record at %d the replica applied last (a record was lost, altered or reordered)", errCorrupt, s.head)
	case rec.epoch < s.epoch:
		return fmt.Errorf("%w: written in epoch %d after a record of epoch %d", errCorrupt, rec.epoch, s.epoch)
	case rec.schema > s.schema:
		return fmt.Errorf("written with schema version %d; this build's replica is at %d: upgrade trellis", rec.schema, s.schema)
	}
	return nil
}

// fail stops the replica for good: it no longer matches the log.
func (s *Store) fail(err error) error {
	s.mu.Lock()
	if s.broken == nil {
		s.broken = err
	}
	s.mu.Unlock()
	s.log.Error("storejs: the replica stopped following the log", "err", err)
	return err
}

// syncHead moves the head up to the replica's position.
func (s *Store) syncHead(ctx context.Context) error {
	pos, err := s.rep.LogPosition(ctx)
	if err != nil {
		return err
	}
	st, err := decodeState(pos.State)
	if err != nil {
		return s.fail(fmt.Errorf("the replica's log position: %w", err))
	}
	s.advance(pos.Seq, st)
	return nil
}

// advance moves the head to seq, whose record st describes; never back.
func (s *Store) advance(seq uint64, st replicaState) {
	s.mu.Lock()
	if seq <= s.head {
		s.mu.Unlock()
		return
	}
	if st.epoch != s.epoch {
		close(s.newEpoch)
		s.newEpoch = make(chan struct{})
	}
	s.head, s.epoch, s.hash = seq, st.epoch, st.hash
	close(s.advanced)
	s.advanced = make(chan struct{})
	s.mu.Unlock()
}

// epochChanged returns a channel closed when the replica reaches a record of
// another epoch: a new writer began.
func (s *Store) epochChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newEpoch
}

// waitApplied waits until the replica applied the log up to seq.
func (s *Store) waitApplied(ctx context.Context, seq uint64) error {
	for {
		s.mu.Lock()
		head, ch, broken := s.head, s.advanced, s.broken
		s.mu.Unlock()
		switch {
		case broken != nil:
			return broken
		case head >= seq:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.quit:
			return store.ErrClosed
		}
	}
}

// read is called before every read of the replica.
func (s *Store) read(ctx context.Context) error {
	select {
	case <-s.quit:
		return store.ErrClosed
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

// write runs a write on this server's replica when it writes the log, and
// forwards it to the server that does otherwise (also when this one was
// deposed in the middle of it: its batch was rolled back).
func (s *Store) write(ctx context.Context, method string, in, out any, local func(context.Context) error) error {
	if err := s.read(ctx); err != nil {
		return err
	}
	if s.isLeading() {
		err := local(ctx)
		if !errors.Is(err, storesqlite.ErrReplica) && !errors.Is(err, errFenced) {
			return err
		}
		if err := s.read(ctx); err != nil {
			return err // closed while it ran: the replica stopped writing
		}
	}
	return s.fwd.Call(ctx, method, in, out)
}

func (s *Store) isLeading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// Leading reports whether this server writes the log now.
func (s *Store) Leading() bool { return s.isLeading() }

// Close stops following and writing the log (handing the lease over at
// once), and closes the replica and the connection or embedded server.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.done
		s.closeErr = s.closeAll()
	})
	return s.closeErr
}

func (s *Store) closeAll() error {
	var errs []error
	if s.rep != nil {
		errs = append(errs, s.rep.Close())
	}
	if s.nc != nil && s.cfg.Conn == nil { // Config.Conn is the caller's
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// Subscribe implements store.Subscriber: the replica signals the topics of
// every record it applies or writes.
func (s *Store) Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error) {
	if err := s.read(ctx); err != nil {
		return nil, nil, err
	}
	return s.rep.Subscribe(ctx, topic)
}

// Ready reports whether the store can serve: the replica follows the log.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.read(ctx); err != nil {
		return err
	}
	return s.rep.Ready(ctx)
}

// appliedSeq is the log sequence the replica reached.
func (s *Store) appliedSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}
