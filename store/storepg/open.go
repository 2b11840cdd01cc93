package storepg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/store/internal/sqlstore"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-dev/trellis/internal/notify"
	"github.com/trellis-dev/trellis/store"
)

// idlePingAfter is how long a pooled connection may sit idle before it is pinged
// when acquired.
const idlePingAfter = time.Minute

// idleInTxTimeout is the store's connections' idle_in_transaction_session_timeout
// unless the URL sets one: Postgres ends a session that has sat inside a
// transaction that long, and with it the transaction and its row locks. The
// store's own transactions never pause between statements for more than a few
// milliseconds of Go; a process frozen mid-transaction (SIGSTOP, a VM paused) does.
// Without it, a scheduler leader frozen inside a schedule's fire, which locks the
// lease row first, kept every other server from taking the lease until it was
// resumed, and a worker frozen inside a write kept its runs locked from every
// expiry sweep (they skip locked rows). Below the scheduler's default lease
// (10 s), so that the lease, not the lock, bounds a takeover. A transactional
// step (CheckpointTx) turns it off for its own transaction: the user's code may
// pause there.
const idleInTxTimeout = "5s"

// Store is a store.Store on a PostgreSQL schema. Create it with Open.
//
// Most methods of store.Store and of its optional interfaces are the ones the
// SQL drivers share (package store/internal/sqlstore), which go doc does not
// list here; those below are this driver's own.
type Store struct {
	cfg     Config
	log     *slog.Logger
	id      string // tells this store's notifications from other stores'
	channel string // the LISTEN/NOTIFY channel of the schema
	pool    *pgxpool.Pool
	hub     notify.Hub
	w       *writer
	e       *ender    // child-final checkpoints
	n       *notifier // notifications of transactions of their own
	k       *keyedCreator
	lis     *listener

	subMu sync.Mutex
	subs  map[string]int // subscribed topics, re-signalled after a listener reconnect

	closeOnce sync.Once
	closeErr  error
	closedCh  chan struct{}

	transactions atomic.Int64
	requests     atomic.Int64
	commits      sqlstore.CommitObserver

	mergeSingle bool     // tests: a lone checkpoint also uses sqlCheckpoints
	qualified   sync.Map // statement -> statement with schema-qualified tables

	// methods are the store methods the SQL drivers share (seam.go), bound
	// to this store by Open.
	methods
}

var _ store.Store = (*Store)(nil)

// Stats counts the writer's work since Open.
type Stats struct {
	// Transactions is the number of write transactions committed.
	Transactions int64
	// Requests is the number of write requests those transactions carried.
	Requests int64
}

// Open connects to the database, creates the schema and applies pending migrations,
// and starts the writers and the notification listener. With cfg.NoMigrate it
// opens an existing, migrated schema only.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("opening postgres store: %w: %w", store.ErrInvalidParams, err)
	}
	obj, err := sqlstore.OpenObjectBlobs(ctx, cfg.Blobs)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store: payloads stored apart: %w", err)
	}
	poolCfg, err := poolConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	s := &Store{
		cfg: cfg, log: cfg.Logger, id: randomID(), channel: channelName(cfg.Schema),
		subs: make(map[string]int), closedCh: make(chan struct{}),
	}
	sqlstore.Bind(&s.methods, sqlstore.Binding{SQL: shared, Driver: seam{s}, Own: seam{s}, Workers: s,
		Log: s.log, Name: "storepg"})
	if s.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	migrate := s.Migrate
	if cfg.NoMigrate {
		migrate = s.requireMigrated
	}
	if err := migrate(ctx); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	sqlstore.OpenBlobs(&s.methods, obj, cfg.BlobThreshold)
	if s.lis, err = startListener(ctx, s, poolCfg.ConnConfig.Copy()); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	s.n = startNotifier(s)
	s.w = startWriter(s)
	s.e = startEnder(s)
	s.k = startKeyedCreator(s)
	return s, nil
}

// poolConfig is the connection pool's configuration for cfg.
func poolConfig(cfg Config) (*pgxpool.Config, error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: Config.URL: %w", store.ErrInvalidParams, err)
	}
	poolCfg.MaxConns = int32(cfg.MaxConns)
	poolCfg.AfterConnect = registerTimeCodec
	if poolCfg.ConnConfig.ConnectTimeout == 0 { // the URL sets none
		poolCfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	// pgxpool pings a connection idle for over a second before handing it out: a
	// whole transaction's worth of server work every poll of an idle worker. A dead
	// connection fails its request instead, which the caller retries.
	poolCfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > idlePingAfter
	}
	// The schema, then public: a transactional step's own statements (CheckpointTx)
	// run on these connections and may name their tables unqualified.
	poolCfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize() + ", public"
	poolCfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	// Plan every execution for its parameters. pgx prepares each statement, and
	// after five executions Postgres may keep a generic plan chosen while the
	// tables were small or had no statistics (a fresh schema; no ANALYZE yet, or
	// none at all where autovacuum is off): w1 at n = 20,000 then cost the server
	// anywhere from 3.0 to 6.7 s of CPU from one run to the next, and 3.5 to 4.4 s
	// with custom plans. A URL that sets plan_cache_mode keeps its own. The
	// writer's batches of only statements whose generic plan is their custom
	// plan in every state of the tables (stmt.generic: a lone create or
	// checkpoint, as in w3) set force_generic_plan for their transaction.
	if _, ok := poolCfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		poolCfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	if _, ok := poolCfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		poolCfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = idleInTxTimeout
	}
	return poolCfg, nil
}

// now reads the clock, in UTC.
func (s *Store) now() time.Time { return s.cfg.Now().UTC() }

// Stats returns counters of the writer's work (group commit efficiency is
// Requests/Transactions).
func (s *Store) Stats() Stats {
	return Stats{Transactions: s.transactions.Load(), Requests: s.requests.Load()}
}

// Subscribe implements store.Store. Signals come from this store's own commits at
// once and from other processes' commits through LISTEN/NOTIFY.
// The subscription ends when the returned function is called or ctx ends.
func (s *Store) Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("subscribing: %w", err)
	}
	select {
	case <-s.closedCh:
		return nil, nil, fmt.Errorf("subscribing: %w", store.ErrClosed)
	default:
	}
	ch, stop := s.hub.Subscribe(topic)
	s.subMu.Lock()
	s.subs[topic]++
	s.subMu.Unlock()
	var once sync.Once
	end := func() {
		once.Do(func() {
			stop()
			s.subMu.Lock()
			if s.subs[topic]--; s.subs[topic] <= 0 {
				delete(s.subs, topic)
			}
			s.subMu.Unlock()
		})
	}
	stopAfter := context.AfterFunc(ctx, end)
	return ch, func() { stopAfter(); end() }, nil
}

// WatchRuns implements store.RunWatcher. The feed carries this store's own
// commits and, through the listener, other processes'.
func (s *Store) WatchRuns(namespace string) (store.RunFeed, bool) {
	return s.hub.Feed(store.RunTopicPrefix(namespace)), true
}

// signalAll signals TopicReady and every subscribed topic: after the listener lost
// its connection, notifications may have been missed, so every waiter re-checks.
func (s *Store) signalAll() {
	s.subMu.Lock()
	topics := make([]string, 0, len(s.subs)+1)
	topics = append(topics, store.TopicReady)
	for t := range s.subs {
		topics = append(topics, t)
	}
	s.subMu.Unlock()
	s.hub.Publish(topics...)
	s.hub.MarkAll()
}

// Close stops the writers (pending requests fail with store.ErrClosed) and the
// listener, and closes the pool. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closedCh)
		if s.w != nil {
			s.w.stop()
		}
		if s.e != nil {
			s.e.stop()
		}
		if s.k != nil {
			s.k.stop()
		}
		if s.n != nil {
			s.n.stop()
		}
		if s.lis != nil {
			s.lis.stop()
		}
		s.closeErr = sqlstore.CloseBlobs(&s.methods)
		s.pool.Close()
	})
	return s.closeErr
}

// closed reports whether Close was called.
func (s *Store) closed() bool {
	select {
	case <-s.closedCh:
		return true
	default:
		return false
	}
}

// readErr maps errors of the pool after Close to store.ErrClosed.
func (s *Store) readErr(err error) error {
	if err != nil && s.closed() {
		return store.ErrClosed
	}
	return err
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// channelName is the notification channel of a schema (at most 63 bytes).
func channelName(schema string) string {
	c := "trellis." + schema
	if len(c) > 63 {
		h := fnv.New64a()
		h.Write([]byte(schema))
		c = fmt.Sprintf("trellis.%s.%x", schema[:38], h.Sum64())
	}
	return c
}
