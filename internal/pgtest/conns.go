package pgtest

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// The connections of the tests' own housekeeping (emptying a schema for reuse,
// dropping one): kept idle between uses instead of one connection per cleanup.
// Each connection costs the server a process of its own, started and torn down
// (a fork, its catalog caches filled again, its page tables): with a store's
// pool and listener, the conformance suites started thousands of them, and the
// server's CPU was a quarter of CI's. An idle connection holds no goroutine, so
// goleak checks after the tests see none; the process's exit closes them.
var housekeeping = struct {
	mu   sync.Mutex
	idle map[string][]*pgx.Conn // by URL
}{idle: map[string][]*pgx.Conn{}}

// maxIdle is the idle connections kept per URL: about the cleanups of
// parallel tests that overlap.
const maxIdle = 4

// withConn runs f on a connection to url: an idle one, or a new one. The
// connection is kept for the next call when f succeeds and the connection is
// not in a transaction; closed otherwise.
func withConn(ctx context.Context, url string, f func(*pgx.Conn) error) error {
	housekeeping.mu.Lock()
	var conn *pgx.Conn
	if idle := housekeeping.idle[url]; len(idle) > 0 {
		conn, housekeeping.idle[url] = idle[len(idle)-1], idle[:len(idle)-1]
	}
	housekeeping.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		var err error
		if conn, err = pgx.Connect(ctx, url); err != nil {
			return err
		}
	}
	err := f(conn)
	if err != nil || conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		_ = conn.Close(context.Background())
		return err
	}
	housekeeping.mu.Lock()
	defer housekeeping.mu.Unlock()
	if len(housekeeping.idle[url]) >= maxIdle {
		_ = conn.Close(context.Background())
		return nil
	}
	housekeeping.idle[url] = append(housekeeping.idle[url], conn)
	return nil
}
