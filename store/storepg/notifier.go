package storepg

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notifications of transactions of their own (inTx: keyed writes, waiting
// checkpoints, cancellations...) are sent after the commit, by the notifier,
// rather than by the transaction itself.
//
// A transaction that calls pg_notify takes a lock on the database's notification
// queue in its pre-commit and holds it until its commit ends, fsync included, so
// notifying transactions commit one at a time: a keyed start (one transaction
// each) made about 700 starts/s through a server, whatever the number of
// connections, while the server and Postgres sat mostly idle. Sent afterwards, a
// transaction's notifications no longer hold its commit, and the notifier sends
// those of every transaction committed meanwhile in one transaction, committed
// without waiting for the WAL flush (synchronous_commit off for it):
// a notification needs no durability.
//
// The local hub is signalled at once, as before; other processes are signalled a
// moment later. A crash between a commit and its notification loses the
// notification for the other processes: their workers find the work at their
// next claim (at the latest their PollInterval), and a result waiter on another
// server sees the run when its wait ends and the client asks again. The
// writer's batches keep notifying in their own transaction: they commit one at a
// time anyway.
type notifier struct {
	s       *Store
	mu      sync.Mutex
	pending []string // topics to send
	kick    chan struct{}
	quit    chan struct{}
	wg      sync.WaitGroup
}

// The notifier's transaction is two statements sent together (one implicit
// transaction): sqlAsyncCommit, so that its commit does not wait for the WAL
// flush, then sqlNotify, which sends $2's payloads on channel $1 (the
// statement the writer's batches end with). As one statement, the setting in a
// subquery of the notify, Postgres planned it in 40 µs at every send (the
// store's connections plan each execution), against 11 µs to execute it: a
// keyed start through a server sends one, and the planning was about a sixth
// of Postgres' time per run of w3 through a server (docs/benchmarks.md).
const sqlNotify = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`

func startNotifier(s *Store) *notifier {
	n := &notifier{s: s, kick: make(chan struct{}, 1), quit: make(chan struct{})}
	n.wg.Go(n.run)
	return n
}

// add queues topics to send; it never blocks.
func (n *notifier) add(topics []string) {
	if len(topics) == 0 {
		return
	}
	n.mu.Lock()
	n.pending = append(n.pending, topics...)
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// stop sends what is queued and ends the notifier.
func (n *notifier) stop() {
	close(n.quit)
	n.wg.Wait()
}

func (n *notifier) run() {
	for {
		select {
		case <-n.kick:
			n.send()
		case <-n.quit:
			n.send()
			return
		}
	}
}

// notifyTimeout bounds one send.
const notifyTimeout = 5 * time.Second

// send sends the queued topics in one statement. On failure it tries once more;
// then the notifications are dropped (logged): listeners fall back on polling.
func (n *notifier) send() {
	n.mu.Lock()
	topics := n.pending
	n.pending = nil
	n.mu.Unlock()
	payloads := n.s.payloads([]*request{{topics: topics}})
	if len(payloads) == 0 {
		return
	}
	var err error
	for try := 0; try < 2; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		b := &pgx.Batch{}
		b.Queue(sqlAsyncCommit)
		b.Queue(sqlNotify, n.s.channel, payloads)
		err = n.s.pool.SendBatch(ctx, b).Close()
		cancel()
		if err == nil {
			return
		}
	}
	n.s.log.Warn("storepg: sending notifications", "topics", len(topics), "err", err)
}
