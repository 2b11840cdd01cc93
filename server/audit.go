package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// The audit log (docs/security.md, "Audit log"): every request to a route
// whose rule names an audit action (route.audit, uiRoute.audit: every mutating
// route of the API and every form of the web UI) leaves an entry once it is
// answered, when it came from a known principal: who, what, on which object,
// how it ended, its request ID and its source. The middleware derives the
// entry from the route's rule, the call and the error; a handler only names
// what the path does not (the run a start created, the name a create took
// from its body). Entries are buffered in memory and appended to the store in
// batches by the auditor's goroutine, so that no request pays a store write.

// Defaults of the audit log's Config fields.
const (
	DefaultAuditFlushInterval = time.Second
	DefaultAuditBuffer        = 50_000
)

// auditFlushAt is how many buffered entries make the auditor write at once
// rather than at its next tick.
const auditFlushAt = 500

// auditRule is how a route's requests are audited: the action they do and
// the type of object they act on (store.AuditTarget.Type). The zero rule
// audits nothing (reads).
type auditRule struct {
	action string // noun first: "run.cancel"
	target string // run, runs, approval, namespace, queue, schedule, token, session
}

// audited reports whether the rule audits.
func (a auditRule) audited() bool { return a.action != "" }

// Target types.
const (
	targetRun       = "run"
	targetRuns      = "runs" // a batch of starts
	targetApproval  = "approval"
	targetNamespace = "namespace"
	targetQueue     = "queue"
	targetSchedule  = "schedule"
	targetToken     = "token"
	targetSession   = "session"
)

// auditNote is what a handler adds to its request's audit entry: the object
// when the path does not name it, and what the change made.
type auditNote struct {
	ns, id, detail string
}

// noteTarget names the object the request acted on (its namespace stays the
// call's).
func (c *call) noteTarget(id string) { c.note.id = id }

// noteDetail says what the change made: IDs and counts, never a payload.
func (c *call) noteDetail(format string, a ...any) { c.note.detail = fmt.Sprintf(format, a...) }

// auditRequest adds the entry of an answered request to the audit log: err is
// what the handler (or the middleware) refused it with, nil on success. A
// request whose principal is unknown (refused before authentication, or a
// sign-in with a bad token) leaves none: it is in the access log.
func (s *Server) auditRequest(w http.ResponseWriter, r *http.Request, rule auditRule, c *call, via string, err error) {
	if !rule.audited() || c.principal == nil || errors.Is(err, ErrRateLimited) {
		return // a request refused by a cap ran nothing (it is in the access log)
	}
	if err != nil && s.auditRefusals.allow(c.principal, s.cfg.Clock.Now()) != nil {
		// Refusals are kept to a few a second per principal, so that no token
		// can flood the log with them (and push real changes out of the
		// buffer); the others are counted.
		s.auditor.droppedTotal.Inc()
		return
	}
	e := store.AuditEntry{Time: s.cfg.Clock.Now(), Principal: c.principal.Name, Action: rule.action,
		Target: s.auditTarget(r, rule, c), Outcome: "ok", Via: via, Detail: c.note.detail}
	if ri := requestInfoOf(r.Context()); ri != nil {
		e.RequestID, e.Source = ri.id, ri.source
	} else {
		e.Source = s.clientAddr(r)
	}
	switch {
	case err != nil:
		e.Outcome, _ = problemCode(err)
	case w.Header().Get(IdempotentReplayedHeader) == "true":
		e.Detail = "idempotent replay: nothing changed"
	}
	s.auditor.add(sanitizeEntry(e))
}

// auditTarget is the object of a request: what the handler noted, else what
// the path names.
func (s *Server) auditTarget(r *http.Request, rule auditRule, c *call) store.AuditTarget {
	t := store.AuditTarget{Namespace: c.ns, Type: rule.target, ID: c.note.id}
	switch {
	case c.note.ns != "":
		t.Namespace = c.note.ns
	case t.Namespace == "":
		t.Namespace = r.PathValue("ns") // refused before the middleware read it
	}
	if t.ID != "" {
		return t
	}
	switch rule.target {
	case targetRun:
		if c.run != nil {
			t.ID = c.run.ID // {id} may be a workflow ID
		} else {
			t.ID = r.PathValue("id")
		}
	case targetApproval:
		t.ID = r.PathValue("id")
	case targetQueue:
		t.ID = r.PathValue("queue")
	case targetSchedule, targetToken:
		t.ID = r.PathValue("name")
	case targetNamespace:
		t.ID = t.Namespace
	}
	return t
}

// problemCode is the stable code err is answered with ("internal" for an
// error the table does not know).
func problemCode(err error) (string, bool) {
	p, known := problemFor(err)
	return p.Code, known
}

// auditTextMax caps a text field of an entry the server writes: paths and
// bodies are checked to 255 bytes, but a refused request's are not.
const auditTextMax = 255

// sanitizeEntry makes each text field of e valid for the store (UTF-8, no
// NUL) and short: a refused request's path may hold anything.
func sanitizeEntry(e store.AuditEntry) store.AuditEntry {
	for _, f := range []*string{&e.Principal, &e.Target.Namespace, &e.Target.ID, &e.Detail, &e.Source, &e.RequestID} {
		*f = auditText(*f)
	}
	return e
}

func auditText(s string) string {
	if len(s) <= auditTextMax && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	for len(s) > auditTextMax {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// Refused requests audited per principal (Server.auditRefusals): a second's
// worth of a busy client's mistakes, and no flood.
const (
	auditRefusalRate  = 10
	auditRefusalBurst = 100
)

// auditor buffers audit entries and appends them to the store in batches,
// from a goroutine of its own: every FlushInterval, or as soon as
// auditFlushAt entries wait. The buffer holds at most max entries; beyond,
// an entry is dropped and counted (trellis_audit_entries_dropped_total), and
// the loss is logged. Entries that failed to be written stay buffered for the
// next flush. stop writes what is left.
type auditor struct {
	st     store.AuditStore
	logger *slog.Logger
	every  time.Duration
	max    int
	clock  clock.Clock

	mu      sync.Mutex
	buf     []store.AuditEntry
	dropped int // since the last warning

	kick    chan struct{}
	quit    chan struct{}
	done    chan struct{} // closed when the loop has returned
	started atomic.Bool
	stopped sync.Once
	closed  atomic.Bool // stop has begun: an entry added now is counted as dropped
	// flushing is the context of the loop's flushes: stop cancels it when
	// Shutdown's context ends first, so that a slow flush in progress does not
	// outlast it (see stop).
	flushing   context.Context
	stopFlushs context.CancelFunc

	droppedTotal, writtenTotal prometheus.Counter
}

func newAuditor(st store.AuditStore, cfg Config, reg prometheus.Registerer) (*auditor, error) {
	a := &auditor{st: st, logger: cfg.Logger, every: cfg.AuditFlushInterval, max: cfg.AuditBuffer, clock: cfg.Clock,
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		droppedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_audit_entries_dropped_total",
			Help: "Audit entries dropped: the server's buffer was full (the store did not take them fast enough) or it was stopping, or a principal's refused requests beyond 10 a second."}),
		writtenTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_audit_entries_written_total",
			Help: "Audit entries the server appended to the store."}),
	}
	a.flushing, a.stopFlushs = context.WithCancel(context.Background())
	var err error
	if a.droppedTotal, err = register(reg, a.droppedTotal); err != nil {
		return nil, fmt.Errorf("registering audit metrics: %w", err)
	}
	if a.writtenTotal, err = register(reg, a.writtenTotal); err != nil {
		return nil, fmt.Errorf("registering audit metrics: %w", err)
	}
	return a, nil
}

// start launches the writing goroutine (once); stop ends it.
func (a *auditor) start() {
	if a.started.CompareAndSwap(false, true) {
		go a.loop()
	}
}

// add buffers an entry, or drops it when the buffer is full or the auditor
// has stopped.
func (a *auditor) add(e store.AuditEntry) {
	a.mu.Lock()
	if len(a.buf) >= a.max || a.closed.Load() {
		a.dropped++
		a.mu.Unlock()
		a.droppedTotal.Inc()
		return
	}
	a.buf = append(a.buf, e)
	n := len(a.buf)
	a.mu.Unlock()
	if n == auditFlushAt {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

func (a *auditor) loop() {
	defer close(a.done)
	tick := a.clock.NewTimer(a.every)
	defer tick.Stop()
	for {
		select {
		case <-a.quit:
			return
		case <-tick.C():
		case <-a.kick:
		}
		ctx, cancel := context.WithTimeout(a.flushing, auditWriteTimeout)
		err := a.flush(ctx)
		cancel()
		if err != nil {
			a.logger.Warn("writing the audit log (the entries stay buffered)", "err", err)
		}
		tick.Reset(a.every) // the next flush an interval after this one ended
	}
}

// auditWriteTimeout bounds one flush of the loop.
const auditWriteTimeout = 30 * time.Second

// stop ends the loop (after a flush in progress) and writes the buffered
// entries within ctx. Idempotent; later calls write nothing.
func (a *auditor) stop(ctx context.Context) error {
	var err error
	a.stopped.Do(func() {
		a.closed.Store(true)
		close(a.quit)
		if a.started.Load() {
			// A flush under way ends first: cancelled, its write could still
			// commit (a store's group commit finishes a batch its caller left),
			// and its entries, put back, would be written twice. Only when
			// ctx ends first is it cancelled, and then nothing more is written.
			select {
			case <-a.done:
			case <-ctx.Done():
				a.stopFlushs()
				<-a.done
			}
		}
		a.stopFlushs()
		// Once ctx has ended a write begun might still commit after the store
		// reported the end: the entries are counted lost, not written twice.
		if err = ctx.Err(); err == nil {
			err = a.flush(ctx)
		}
		if err != nil {
			a.mu.Lock()
			lost := len(a.buf)
			a.buf = nil
			a.mu.Unlock()
			if lost == 0 {
				err = nil
				return
			}
			a.droppedTotal.Add(float64(lost))
			err = fmt.Errorf("writing the last %d audit entries: %w", lost, err)
		}
	})
	return err
}

// flush writes every buffered entry, in batches of at most
// store.MaxAuditBatch. On an error the entries not written go back to the
// front of the buffer (but for a batch the store refused as invalid, which
// would be refused again: it is dropped and logged).
func (a *auditor) flush(ctx context.Context) error {
	a.mu.Lock()
	pending, dropped := a.buf, a.dropped
	a.buf, a.dropped = nil, 0
	a.mu.Unlock()
	if dropped > 0 {
		a.logger.Error("audit log: entries dropped, the buffer was full", "dropped", dropped, "buffer", a.max)
	}
	for len(pending) > 0 {
		n := min(len(pending), store.MaxAuditBatch)
		err := a.st.AuditAppend(ctx, &store.AuditAppendParams{Entries: pending[:n]})
		switch {
		case errors.Is(err, store.ErrInvalidParams):
			a.droppedTotal.Add(float64(n))
			a.logger.Error("audit log: the store refused a batch; dropped", "entries", n, "err", err)
		case err != nil:
			a.putBack(pending)
			return err
		default:
			a.writtenTotal.Add(float64(n))
		}
		pending = pending[n:]
	}
	return nil
}

// putBack returns entries that were not written to the front of the buffer,
// keeping at most max (the newest beyond it are dropped).
func (a *auditor) putBack(rest []store.AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	merged := append(rest[:len(rest):len(rest)], a.buf...)
	if over := len(merged) - a.max; over > 0 {
		merged = merged[:a.max]
		a.dropped += over
		a.droppedTotal.Add(float64(over))
	}
	a.buf = merged
}
