package storepg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reconnect backoff of the listener.
const (
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 2 * time.Second
)

// topicAll, in a NOTIFY payload, stands for a topic too long to send: receivers
// signal every topic (signalAll).
const topicAll = "*"

// listener holds one connection LISTENing on the schema's channel and forwards other
// stores' notifications to this store's hub. When the connection drops it reconnects
// with backoff and then signals every subscribed topic, since notifications sent while
// it was away are lost.
type listener struct {
	s      *Store
	cfg    *pgx.ConnConfig
	cancel context.CancelFunc
	done   chan struct{}
}

// startListener connects and LISTENs before returning, so that no notification
// committed after Open returns is missed.
func startListener(ctx context.Context, s *Store, cfg *pgx.ConnConfig) (*listener, error) {
	l := &listener{s: s, cfg: cfg, done: make(chan struct{})}
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting listener: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(runCtx, conn)
	return l, nil
}

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.s.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func (l *listener) run(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	backoff := listenBackoffMin
	for {
		if conn != nil {
			err := l.receive(ctx, conn)
			_ = conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			l.s.log.Warn("storepg: listener connection lost; reconnecting", "err", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		c, err := l.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.s.log.Warn("storepg: listener reconnect failed", "err", err, "retry_in", backoff)
			backoff = min(backoff*2, listenBackoffMax)
			continue
		}
		conn, backoff = c, listenBackoffMin
		l.s.signalAll() // whatever was notified while away
	}
}

// receive forwards notifications until the connection fails or ctx ends.
func (l *listener) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		sender, topics, _ := strings.Cut(n.Payload, "\n")
		if sender == l.s.id || topics == "" {
			continue // this store published its own topics at commit
		}
		ts := strings.Split(topics, "\n")
		if slices.Contains(ts, topicAll) {
			l.s.signalAll()
		}
		l.s.hub.Publish(ts...)
	}
}

func (l *listener) stop() {
	l.cancel()
	<-l.done
}

// CrossProcessSignals reports that this store's wake-ups carry every process's
// commits (NOTIFY): followers of a run's stream need not poll.
func (s *Store) CrossProcessSignals() bool { return true }
