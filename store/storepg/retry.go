package storepg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Retries after losing the database: a restart of the server kills every pooled
// connection, and refuses new ones for a moment.
const (
	reconnectFor   = 15 * time.Second
	reconnectFirst = 20 * time.Millisecond
	reconnectMax   = 500 * time.Millisecond
)

// connRetryable reports an error after which the statements surely did not run: no
// byte was sent (a dead pooled connection, a refused connect), or the server
// terminated the session (shutdown, restart) before answering, so nothing committed.
func connRetryable(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
	}
	return false
}

// backoff paces retries after connection failures, for at most reconnectFor.
type backoff struct {
	start time.Time
	next  time.Duration
}

// wait sleeps before the next retry and reports whether to retry; it gives up when
// the time is spent or quit or done is closed.
func (b *backoff) wait(quit, done <-chan struct{}) bool {
	if b.start.IsZero() {
		b.start, b.next = time.Now(), reconnectFirst
	}
	if time.Since(b.start) > reconnectFor {
		return false
	}
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, reconnectMax)
	select {
	case <-t.C:
		return true
	case <-quit:
		return false
	case <-done:
		return false
	}
}

// read runs a read, retrying it while the connection is being re-established
// (reads are idempotent, so any connection failure may be retried).
func (s *Store) read(ctx context.Context, fn func() error) error {
	var b backoff
	for {
		err := fn()
		if err == nil || !connRetryable(err) || ctx.Err() != nil {
			return err
		}
		if !b.wait(s.closedCh, ctx.Done()) {
			return err
		}
	}
}
