package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis/internal/auth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	ww "github.com/trellis-dev/trellis/internal/workerwire"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/proto"
)

// The worker protocol (docs/worker-protocol.md): the worker role of the storage
// contract over gRPC, served by connect-go on the server's one port.

// Limits of the worker protocol.
const (
	// DefaultMaxWorkerMessageBytes caps one worker protocol message (a batch of
	// checkpoints): a few maximal payloads and their envelopes.
	DefaultMaxWorkerMessageBytes = 4 * DefaultMaxBodyBytes
	// maxClaimCredit caps the runs one Claim may push.
	maxClaimCredit = 1000
	// maxClaimWait caps how long a Claim stream stays open.
	maxClaimWait = 5 * time.Minute
	// maxBatch caps the leases of one ExtendLeases and the checkpoints of one
	// Checkpoint.
	maxBatch = 1000
)

// workerScope says what a worker call's role is checked on.
type workerScope int

const (
	// workerNamespace: the namespace the request names, any queue of it.
	workerNamespace workerScope = iota + 1
	// workerQueues: each queue the request names (the whole namespace when
	// it names none): the queues a worker claims from, resumes the blocked
	// runs of, or advertises in its record.
	workerQueues
	// workerLeases: the queue of every lease the request carries, which the
	// lease's secret binds to its run; a lease without a valid secret is
	// answered as lost and touches nothing.
	workerLeases
	// workerRun: the queue of the run the request names (read from the
	// store unless the grant covers the whole namespace).
	workerRun
	// workerTopic: the namespace for the wake-up topics, the queue of the run
	// for a run's or its stream's topic.
	workerTopic
)

// workerRules is the authorization rule of every worker procedure: role
// `worker` on the scope named. A procedure without one is denied to everyone
// (and fails TestWorkerAuthorizationWalk). Every worker call is authorized on
// the runs and queues it touches: docs/security.md says why ListWorkers and
// RemoveWorker are namespace-wide.
var workerRules = map[string]workerScope{
	workerv1connect.WorkerServiceClaimProcedure:         workerQueues,
	workerv1connect.WorkerServiceExtendLeasesProcedure:  workerLeases,
	workerv1connect.WorkerServiceReleaseLeaseProcedure:  workerLeases,
	workerv1connect.WorkerServiceCheckpointProcedure:    workerLeases,
	workerv1connect.WorkerServiceResumeBlockedProcedure: workerQueues,
	workerv1connect.WorkerServiceListHistoryProcedure:   workerRun,
	workerv1connect.WorkerServiceListChildrenProcedure:  workerRun,
	workerv1connect.WorkerServiceSubscribeProcedure:     workerTopic,
	workerv1connect.WorkerServiceHeartbeatProcedure:     workerQueues,
	workerv1connect.WorkerServiceListWorkersProcedure:   workerNamespace,
	workerv1connect.WorkerServiceRemoveWorkerProcedure:  workerNamespace,
}

// workerService implements the protocol on the server's store.
// workerCompressMinBytes is the smallest worker-protocol answer the server
// compresses.
const workerCompressMinBytes = 16 << 10

type workerService struct {
	s *Server
	// checkpoints counts the Checkpoint calls being served: one alone is a
	// quiet server's, whose ended run's waiter may run first (yieldToWoken).
	checkpoints atomic.Int32
}

// workerHandler returns the path and handler of the worker protocol. Streams
// get no read deadline nor one for the whole stream (they last as long as a
// claim waits or a subscription lives), but each write has its own
// (streamWriter); every message is still bounded by ReadMaxBytes.
// Answers are compressed (when the worker accepts gzip) only from
// workerCompressMinBytes: gzip of the small checkpoint acknowledgements and
// claims cost both processes CPU for nothing (profiles of bench w1 through a
// server).
func (s *Server) workerHandler() (string, http.Handler) {
	path, h := workerv1connect.NewWorkerServiceHandler(&workerService{s: s},
		connect.WithReadMaxBytes(int(s.cfg.MaxWorkerMessageBytes)),
		connect.WithSendMaxBytes(int(s.cfg.MaxWorkerMessageBytes)),
		connect.WithCompressMinBytes(workerCompressMinBytes),
		connect.WithInterceptors(inFlightLimit{s}),
		connect.WithRecover(s.workerPanic))
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/Claim") || strings.HasSuffix(r.URL.Path, "/Subscribe") {
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Time{})
			_ = rc.SetWriteDeadline(time.Time{})
			w = &streamWriter{ResponseWriter: w, rc: rc, timeout: s.cfg.WorkerStreamWriteTimeout}
		}
		s.active.Add(1)
		defer s.active.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// streamWriter gives each write and flush of a long stream a deadline of its own,
// cleared after it: the server's write timeout would end a healthy stream that
// lives for hours, and none at all would let a worker that stops reading hold
// the stream's goroutine for ever. An idle stream has no deadline.
type streamWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *streamWriter) Write(b []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	defer w.rc.SetWriteDeadline(time.Time{})
	return w.ResponseWriter.Write(b)
}

func (w *streamWriter) Flush() {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	defer w.rc.SetWriteDeadline(time.Time{})
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// inFlightLimit counts a worker's unary calls in MaxInFlight, as API requests are
// counted: beyond it a call is refused at once with resource_exhausted (RATE_LIMITED)
// and the client retries it. The long streams (Claim, Subscribe) are not counted:
// a connected worker holds them open. Calls and streams count against their
// principal's caps (workerlimits.go), and streams are registered to end with
// their token.
type inFlightLimit struct{ s *Server }

func (l inFlightLimit) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		select {
		case l.s.inFlight <- struct{}{}:
			defer func() { <-l.s.inFlight }()
		default:
			return nil, fail(fmt.Errorf("%w: %d requests in flight", ww.ErrRateLimited, cap(l.s.inFlight)))
		}
		ctx, err := l.s.admitWorkerCall(ctx, req)
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (inFlightLimit) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l inFlightLimit) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return l.s.wrapWorkerStream(next)
}

// caller is the principal of a worker call, authenticated once by the
// interceptor (workerCaller), and checks that its procedure has a rule; each
// handler then checks the rule on what the request touches.
func (h *workerService) caller(ctx context.Context, procedure string, hdr http.Header) (*auth.Principal, error) {
	p, ok := ctx.Value(workerPrincipalKey{}).(*auth.Principal)
	if !ok { // a handler called without the interceptor (tests)
		var err error
		if p, err = h.s.authenticate(ctx, hdr.Get("Authorization")); err != nil {
			return nil, err
		}
	}
	if _, ok := workerRules[procedure]; !ok {
		return nil, fmt.Errorf("%w: procedure %s has no authorization rule", ww.ErrPermissionDenied, procedure)
	}
	return p, nil
}

// fail converts an error of a handler to a Connect error with its detail.
func fail(err error) error {
	// ErrPermissionDenied and ErrRateLimited are ww's: one identity each.
	if errors.Is(err, ErrUnavailable) {
		err = fmt.Errorf("%w: %v", store.ErrClosed, err)
	}
	if errors.Is(err, ErrRateLimited) {
		return workerLimitErr(err)
	}
	return ww.ToConnect(err)
}

// Claim claims runs for the worker and pushes them (see the proto).
func (h *workerService) Claim(ctx context.Context, req *connect.Request[pb.ClaimRequest], stream *connect.ServerStream[pb.ClaimResponse]) error {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil {
		err = checkQueues(p, m.Namespace, m.Queues)
	}
	if err != nil {
		return fail(err)
	}
	credit := int(m.Credit)
	wait := ww.Duration(m.Wait)
	switch {
	case credit < 0 || credit > maxClaimCredit || credit == 0 && wait > 0:
		return fail(fmt.Errorf("%w: credit must be 1 to %d, not %d", store.ErrInvalidParams, maxClaimCredit, m.Credit))
	case wait < 0 || wait > maxClaimWait:
		return fail(fmt.Errorf("%w: wait must be 0 to %s, not %s", store.ErrInvalidParams, maxClaimWait, wait))
	}
	cp := &store.RunsClaimParams{Namespace: m.Namespace, Queues: m.Queues, Workflows: m.Workflows,
		Versions: ww.VersionsFromPB(m.Versions), Worker: m.Worker, LeaseDuration: ww.Duration(m.LeaseDuration)}
	if wait == 0 {
		cp.Max = credit
		res, err := h.claim(ctx, cp)
		if err != nil {
			return fail(err)
		}
		return h.push(ctx, stream, res, m.Worker)
	}
	// A stream ends as soon as a lease this server pushed to its worker lapses
	// while it is open: a worker that let a lease lapse did not heartbeat for a
	// whole lease (frozen, paused, cut off), and runs pushed now would wait in
	// its connection for the next lease to lapse, and be executed again when it
	// wakes. The lapsed runs go to the streams of live workers; this one's
	// worker, if it is alive, opens a new stream.
	opened := time.Now()
	closeLapse := h.s.leases.openStream(m.Namespace, m.Worker)
	defer closeLapse()
	lapsed := func() bool { return h.s.leases.lapsedSince(m.Namespace, m.Worker, opened) }
	// Subscribe before the first claim, so that a run made due between a claim
	// that found nothing and the wait is not missed.
	ready, unsubscribe, err := h.s.store.Subscribe(ctx, store.TopicReady)
	if err != nil {
		return fail(err)
	}
	defer unsubscribe()
	// While the stream waits with free credit, runs started through this
	// server's API may be created claimed for it (see handoffs).
	cs := h.s.handoffs.open(cp, credit)
	defer func() {
		left := cs.close()
		switch {
		case len(left) == 0:
		case ctx.Err() != nil:
			// The stream ended: its worker went, or its credential was
			// revoked (a revoked worker could not write the runs): hand
			// them back at once rather than when their leases expire.
			releaseClaimed(h.s.store, left...)
		case lapsed():
			releaseClaimed(h.s.store, left...)
		default:
			_ = h.push(ctx, stream, &store.RunsClaimResult{Runs: left}, m.Worker) // or handed back, the stream gone
		}
	}()
	end := func(last *pb.ClaimResponse) error {
		left := cs.close()
		switch {
		case len(left) == 0:
		case lapsed():
			releaseClaimed(h.s.store, left...)
		default:
			if err := h.push(ctx, stream, &store.RunsClaimResult{Runs: left}, m.Worker); err != nil {
				return err
			}
		}
		return stream.Send(last)
	}
	// reconnect ends the stream of a worker whose lease lapsed: it hands back
	// at once the runs of a hand-off not yet sent, and a live worker opens a
	// new stream.
	reconnect := func(runs []*store.ClaimedRun) error {
		releaseClaimed(h.s.store, runs...)
		h.s.cfg.Logger.Warn("worker protocol: a lease of the worker lapsed; its claim stream ends",
			"namespace", m.Namespace, "worker", m.Worker)
		return end(&pb.ClaimResponse{Reconnect: true})
	}
	clk := time.Now
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	recheck := time.NewTimer(claimRecheck)
	defer recheck.Stop()
	soon := time.NewTimer(time.Hour) // armed by a ready signal within claimGap of a claim
	soon.Stop()
	defer soon.Stop()
	var (
		nextDue   *time.Time
		lastClaim time.Time
		soonArmed bool
	)
	claim := true
	for {
		if h.s.draining.Err() != nil {
			return end(&pb.ClaimResponse{Reconnect: true})
		}
		if lapsed() {
			return reconnect(nil)
		}
		credit += cs.withdraw()
		if claim && credit > 0 {
			// A lease of this worker about to lapse: the claim waits for
			// its expiry (then the check above ends the stream) or for
			// the heartbeat that extends it.
			if d := h.s.leases.lapsingIn(m.Namespace, m.Worker, lapseMargin(cp.LeaseDuration)); d > 0 {
				if err := sleepCtx(ctx, h.s.draining.Done(), d); err != nil {
					return err
				}
				continue
			}
			cp.Max = credit
			lastClaim = clk()
			res, err := h.claim(ctx, cp)
			if err != nil {
				return fail(err)
			}
			nextDue = res.NextDue
			if len(res.Runs) > 0 {
				// A run whose lease lapsed with this worker since the check
				// above goes back, not down this stream.
				if h.s.leases.relapsed(res.Runs, m.Worker, opened) {
					return reconnect(res.Runs)
				}
				if err := h.push(ctx, stream, res, m.Worker); err != nil {
					return err
				}
				credit -= len(res.Runs)
				if len(res.Runs) == cp.Max {
					continue // more may be due at once
				}
			}
		}
		claim = false
		// The last claim found every due run: offer the rest for hand-off.
		// With no credit left and no hand-off under way, the stream is done.
		if !cs.offer(credit) {
			return nil
		}
		credit = 0
		due.Stop()
		if nextDue != nil {
			due.Reset(max(nextDue.Sub(clk()), 0))
		}
		recheck.Reset(claimRecheck)
		select {
		case cr := <-cs.runs:
			runs := cs.take(cr)
			if lapsed() {
				return reconnect(runs)
			}
			if err := h.push(ctx, stream, &store.RunsClaimResult{Runs: runs, NextDue: nextDue}, m.Worker); err != nil {
				return err
			}
		case <-cs.wake: // a reserved slot came back: offered again, or the end
		case <-ready:
			switch now, wait := claimAfterReady(clk(), lastClaim); {
			case now:
				claim = true
			case !soonArmed:
				soon.Reset(wait)
				soonArmed = true
			}
		case <-soon.C:
			soonArmed = false
			claim = true
		case <-due.C:
			claim = true
		case <-recheck.C:
			claim = true
		case <-deadline.C:
			return end(&pb.ClaimResponse{NextDue: ww.TsPtr(nextDue)})
		case <-h.s.draining.Done():
			return end(&pb.ClaimResponse{Reconnect: true})
		case <-ctx.Done():
			return nil
		}
	}
}

// claimRecheck is how long a claim stream waits for a wake-up before it claims
// again anyway: the fallback, as an embedded worker's PollInterval is, for a
// wake-up that never came (a notification lost with a crashed server, say), so
// that such a run waits about a second rather than the stream's whole wait.
const claimRecheck = time.Second

// lapseMargin is how close to its expiry a claim stream holds back its
// claims when a lease of its worker is not extended (see lapsingIn): the
// time a claim may take between the stream's check and the store, well
// under a heartbeat's period of a lease of the stream's own length.
func lapseMargin(lease time.Duration) time.Duration {
	return min(100*time.Millisecond, lease/10)
}

// sleepCtx waits for d, or until ctx ends (its error) or stop is closed.
func sleepCtx(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// claimGap is the least time between two claims of a stream that runs made
// ready cause: a ready signal within claimGap of the last claim waits out the
// rest of it, and the signals that come meanwhile share one claim. Under load
// (runs created every few hundred microseconds, each batch of creates a
// signal) a claim then takes the runs of several batches rather than one, at
// the cost of at most claimGap of a run's latency; runs started through this
// server while the stream waits are handed to it anyway, without a claim. On
// Postgres a claim is five or six statements whose planning alone costs about 1.5 ms
// of the database's CPU, so w1 through a server claimed about 24 runs at a
// time and spent an eighth of Postgres' time claiming.
const claimGap = 25 * time.Millisecond

// claimAfterReady decides what a ready signal at now does to a stream whose
// last claim was at last: claim now when claimGap has passed, else claim
// after wait (one timer, armed once, serves every signal until it fires).
func claimAfterReady(now, last time.Time) (claimNow bool, wait time.Duration) {
	if gap := claimGap - now.Sub(last); gap > 0 {
		return false, gap
	}
	return true, 0
}

// claim claims runs for a worker, its latency recorded in trellis_claim_seconds.
func (h *workerService) claim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	t0 := time.Now()
	p.StepTimeoutGrace = h.s.cfg.StepTimeoutGrace // the server's, never a worker's
	res, err := h.s.store.RunsClaim(ctx, p)
	if err == nil { // as the embedded workers count them
		h.s.observer.ObserveClaim(time.Since(t0))
		h.s.observer.ObserveEndedAttempts(res.EndedAttempts)
	}
	return res, err
}

// push sends claimed runs; runs it could not send are handed back at once
// rather than waiting for their leases to expire.
func (h *workerService) push(ctx context.Context, stream *connect.ServerStream[pb.ClaimResponse], res *store.RunsClaimResult, worker string) error {
	for _, cr := range res.Runs {
		h.s.queues.Fill(ctx, cr) // the worker cannot read queue records
	}
	h.s.leaseKeys.SignClaimed(res.Runs...)
	// Counted before the send: a quick run's final checkpoint may come back
	// before Send returns, and its end must find the lease to end.
	h.s.leases.granted(res.Runs, worker)
	h.s.histories.pushed(res.Runs)
	err := stream.Send(&pb.ClaimResponse{Runs: ww.ClaimedToPB(res.Runs), NextDue: ww.TsPtr(res.NextDue)})
	if err != nil {
		for _, cr := range res.Runs {
			h.s.leases.ended(cr.Lease())
		}
		releaseClaimed(h.s.store, res.Runs...)
		return err
	}
	return nil
}

// releaseClaimed hands runs claimed for a stream that cannot take them back to
// the store at once, rather than when their leases expire.
func releaseClaimed(st store.Store, runs ...*store.ClaimedRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, cr := range runs {
		_ = st.LeaseRelease(ctx, &store.LeaseReleaseParams{Lease: cr.Lease()})
	}
}

// ExtendLeases extends a batch of leases.
func (h *workerService) ExtendLeases(ctx context.Context, req *connect.Request[pb.ExtendLeasesRequest]) (*connect.Response[pb.ExtendLeasesResponse], error) {
	m := req.Msg
	principal, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err != nil {
		return nil, fail(err)
	}
	if len(m.Leases) > maxBatch {
		return nil, fail(fmt.Errorf("%w: at most %d leases per call", store.ErrInvalidParams, maxBatch))
	}
	if len(m.Steps) > 0 && len(m.Steps) != len(m.Leases) {
		return nil, fail(fmt.Errorf("%w: %d steps for %d leases", store.ErrInvalidParams, len(m.Steps), len(m.Leases)))
	}
	leases := make([]store.Lease, len(m.Leases))
	for i, l := range m.Leases {
		leases[i] = ww.LeaseFromPB(l)
	}
	valid, err := h.checkLeases(principal, leases)
	if err != nil {
		return nil, fail(err)
	}
	// Leases without their secret are lost; the store sees only the others.
	p := &store.LeasesExtendParams{Duration: ww.Duration(m.Duration), StepTimeoutGrace: h.s.cfg.StepTimeoutGrace}
	var lost []string
	for i, l := range leases {
		if !valid[i] {
			lost = append(lost, l.RunID)
			continue
		}
		p.Leases = append(p.Leases, l)
		if len(m.Steps) > 0 {
			p.Steps = append(p.Steps, ww.StepFromPB(m.Steps[i]))
		}
	}
	// The leases' new expiry as counted here is taken before the store's
	// own (now plus the duration, at the store's write): it must not be
	// later, or a stream whose worker let the lease lapse would see no lapse
	// at the store's expiry, claim the run again, and only then hand it back
	// (a claim that no worker saw, counted in the run's attempts). It is
	// cut to the microsecond, as Postgres keeps the store's: a store write
	// within the same microsecond kept an expiry some nanoseconds earlier
	// than the one counted here.
	until := h.s.cfg.Clock.Now().Add(p.Duration).Truncate(time.Microsecond)
	res, err := h.s.store.LeasesExtend(ctx, p)
	if err != nil {
		return nil, fail(err)
	}
	h.s.leases.extended(p.Leases, res.Lost, until)
	return connect.NewResponse(&pb.ExtendLeasesResponse{Lost: append(lost, res.Lost...), CancelRequested: res.CancelRequested}), nil
}

// ReleaseLease hands a run back.
func (h *workerService) ReleaseLease(ctx context.Context, req *connect.Request[pb.ReleaseLeaseRequest]) (*connect.Response[pb.ReleaseLeaseResponse], error) {
	m := req.Msg
	principal, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err != nil {
		return nil, fail(err)
	}
	p := &store.LeaseReleaseParams{Lease: ww.LeaseFromPB(m.Lease), Seq: m.Seq}
	valid, err := h.checkLeases(principal, []store.Lease{p.Lease})
	switch {
	case err != nil:
		return nil, fail(err)
	case !valid[0]:
		return nil, fail(fmt.Errorf("%w: run %q: not the secret of this lease", store.ErrLeaseLost, p.Lease.RunID))
	}
	if m.Seq > 0 {
		p.Fingerprint = leaseWriteFingerprint(req.Spec().Procedure, principal.Name, m)
	}
	err = h.s.store.LeaseRelease(ctx, p)
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		h.s.histories.drop(p.Lease)
		// A retried release the store answers as applied ends nothing here:
		// its run attempt was counted the first time.
		if wf, first := h.s.leases.wrote(p.Lease, true); err == nil && first {
			if wf = h.workflowOf(ctx, p.Lease, wf); wf != "" {
				h.s.observer.ObserveRemoteRelease(wf)
			}
		}
	}
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&pb.ReleaseLeaseResponse{}), nil
}

// Checkpoint applies a batch of checkpoints. They reach the store
// concurrently, each on its own goroutine, as concurrent requests of other
// workers do: the store's group commit puts all that arrive together (this
// batch's and other workers') in one transaction with one fsync. Each is
// fenced by its own lease token and succeeds or fails on its own.
func (h *workerService) Checkpoint(ctx context.Context, req *connect.Request[pb.CheckpointRequest]) (*connect.Response[pb.CheckpointResponse], error) {
	m := req.Msg
	h.checkpoints.Add(1)
	defer h.checkpoints.Add(-1)
	principal, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err != nil {
		return nil, fail(err)
	}
	if len(m.Checkpoints) > maxBatch {
		return nil, fail(fmt.Errorf("%w: at most %d checkpoints per call", store.ErrInvalidParams, maxBatch))
	}
	ps := make([]*store.CheckpointParams, len(m.Checkpoints))
	leases := make([]store.Lease, len(m.Checkpoints))
	for i, it := range m.Checkpoints {
		ps[i] = ww.CheckpointFromPB(it)
		leases[i] = ps[i].Lease
	}
	valid, err := h.checkLeases(principal, leases)
	if err != nil {
		return nil, fail(err)
	}
	for i, p := range ps { // a bad checkpoint refuses the whole call: nothing is written
		if valid[i] {
			if err := checkStarts(principal, p.Lease.Namespace, p.Children); err != nil {
				return nil, fail(err)
			}
		}
	}
	out := make([]*pb.CheckpointResult, len(m.Checkpoints))
	one := func(i int) {
		it, p := m.Checkpoints[i], ps[i]
		if !valid[i] {
			out[i] = &pb.CheckpointResult{Error: errorDetail(fmt.Errorf("%w: run %q: not the secret of this lease",
				store.ErrLeaseLost, p.Lease.RunID))}
			return
		}
		_, limit := h.s.queues.Defaults(ctx, p.Lease.Namespace, p.Lease.Queue)
		if err := checkPayloads(p, limit); err != nil {
			out[i] = &pb.CheckpointResult{Error: errorDetail(err)}
			return
		}
		// The protocol's rules, against the run's history: a refused
		// checkpoint writes nothing (internal/protocol).
		lh := h.s.histories.acquire(p.Lease)
		defer lh.mu.Unlock()
		p.Lease.RunSeq = lh.runSeq // the entry is this lease's (acquire)
		if err := lh.check(ctx, h.s.store, p, it.Seq); err != nil {
			out[i] = &pb.CheckpointResult{Error: errorDetail(err)}
			return
		}
		if it.Seq > 0 {
			p.Fingerprint = leaseWriteFingerprint(req.Spec().Procedure, principal.Name, it)
		}
		res, err := func() (res *store.CheckpointResult, err error) {
			if done := h.s.histories.ending(lh, p, func(final *store.Run) {
				h.s.core.Ended(p.Lease.Namespace, p.Lease.RunID, final)
				// The answer to the worker can wait; under load the
				// waiter gets the run with others, and a yield per run
				// cost w1 through a server on Postgres 5% of its rate.
				if len(m.Checkpoints) == 1 && h.checkpoints.Load() == 1 {
					yieldToWoken()
				}
			}); done != nil {
				defer func() { done(res, err) }() // even when the store call panics
			}
			res, err = h.s.store.Checkpoint(ctx, p)
			// Before done hands the ended run to those waiting for it: a
			// client that saw the run end finds it in the metrics.
			h.wrote(ctx, lh, p, it.Seq, res, err)
			return res, err
		}()
		if err != nil {
			out[i] = &pb.CheckpointResult{Error: errorDetail(err)}
			return
		}
		out[i] = &pb.CheckpointResult{CancelRequested: res.CancelRequested, At: ww.Ts(res.At), Replayed: res.Replayed,
			RetryAt: ww.TsPtr(res.RetryAt)}
	}
	if len(m.Checkpoints) == 1 {
		one(0)
	} else {
		var wg sync.WaitGroup
		for i := range m.Checkpoints {
			wg.Go(func() { one(i) })
		}
		wg.Wait()
	}
	return connect.NewResponse(&pb.CheckpointResponse{Results: out}), nil
}

// wrote follows checkpoint p of a lease, written through this server with
// result res or err: the lease's history entry (lh, locked) and its record in
// h.s.leases, and the server's metrics of what the store applied.
func (h *workerService) wrote(ctx context.Context, lh *leaseHistory, p *store.CheckpointParams, seq int64, res *store.CheckpointResult, err error) {
	ends := err == nil && p.Status != store.StatusRunning || errors.Is(err, store.ErrLeaseLost)
	if err == nil && !res.Replayed {
		lh.applied(p, seq, res.CancelRequested)
	}
	if ends {
		h.s.histories.drop(p.Lease)
	}
	wf, _ := h.s.leases.wrote(p.Lease, ends)
	if err != nil || res.Replayed || !ends && len(p.Attempts) == 0 && len(p.Ops) == 0 {
		return
	}
	if wf = h.workflowOf(ctx, p.Lease, wf); wf != "" {
		obs := p
		if res.RetryAt != nil { // the failure became a workflow retry: the run waits
			retried := *p
			retried.Status, retried.Error = store.StatusWaiting, nil
			obs = &retried
		}
		h.s.observer.ObserveRemoteCheckpoint(wf, obs)
	}
}

// errorDetail is the detail of a checkpoint's error, as its result carries it.
func errorDetail(err error) *pb.ErrorDetail {
	code, d := ww.Detail(err)
	d.Code = code.String()
	return d
}

// workflowOf returns the workflow of the run of lease l, for the metrics'
// label: known, the workflow the lease count had (from the claim this server
// pushed), else read from the store (a worker that reconnected from another
// server); "" when it cannot be read.
func (h *workerService) workflowOf(ctx context.Context, l store.Lease, known string) string {
	if known != "" {
		return known
	}
	run, err := h.s.store.RunGet(ctx, &store.RunGetParams{Namespace: l.Namespace, Ref: l.RunID, OmitLarge: true})
	if err != nil {
		return ""
	}
	h.s.leases.learned(l, run.Workflow)
	return run.Workflow
}

// leaseWriteFingerprint is the fingerprint of a guarded lease write (store.
// CheckpointParams.Seq): of its procedure, its principal and its message, so
// that a retry matches it and another request under the same key does not.
func leaseWriteFingerprint(procedure, principal string, m proto.Message) int64 {
	buf := fingerprintBufs.Get().(*[]byte)
	defer fingerprintBufs.Put(buf)
	body, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		return 0 // not compared; the message was decoded from the wire, so it encodes
	}
	if cap(body) <= 64<<10 {
		*buf = body // grown: kept for the next (a large one is not)
	}
	fp := int64(binary.BigEndian.Uint64(store.IdempotencyFingerprint(procedure, "", body, principal)))
	if fp == 0 {
		fp = 1 // 0 means none
	}
	return fp
}

// fingerprintBufs are the buffers leaseWriteFingerprint encodes messages in.
var fingerprintBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// ResumeBlocked resumes the blocked runs of workflows.
func (h *workerService) ResumeBlocked(ctx context.Context, req *connect.Request[pb.ResumeBlockedRequest]) (*connect.Response[pb.ResumeBlockedResponse], error) {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil {
		err = checkQueues(p, m.Namespace, m.Queues)
	}
	if err != nil {
		return nil, fail(err)
	}
	n, err := h.s.store.RunsResumeBlocked(ctx, &store.RunsResumeBlockedParams{Namespace: m.Namespace, Workflows: m.Workflows,
		Queues: m.Queues})
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&pb.ResumeBlockedResponse{Resumed: int64(n)}), nil
}

// ListHistory reads a run's ops.
func (h *workerService) ListHistory(ctx context.Context, req *connect.Request[pb.ListHistoryRequest]) (*connect.Response[pb.ListHistoryResponse], error) {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil {
		err = h.checkRun(ctx, p, m.Namespace, m.Ref)
	}
	if err != nil {
		return nil, fail(err)
	}
	ops, err := h.s.store.HistoryList(ctx, &store.HistoryListParams{Namespace: m.Namespace, Ref: m.Ref})
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&pb.ListHistoryResponse{Ops: ww.OpsToPB(ops)}), nil
}

// ListChildren reads the children one op of a parent started.
func (h *workerService) ListChildren(ctx context.Context, req *connect.Request[pb.ListChildrenRequest]) (*connect.Response[pb.ListChildrenResponse], error) {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil {
		err = h.checkRun(ctx, p, m.Namespace, m.Parent)
	}
	if err != nil {
		return nil, fail(err)
	}
	runs, err := h.s.store.RunChildren(ctx, &store.RunChildrenParams{Namespace: m.Namespace, Parent: m.Parent, Position: int(m.Position)})
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&pb.ListChildrenResponse{Runs: ww.RunsToPB(runs)}), nil
}

// Subscribe streams the signals of a topic: an acknowledgement once
// subscribed, then one message per (coalesced) signal, until the client goes
// or the server drains (a last message with reconnect).
func (h *workerService) Subscribe(ctx context.Context, req *connect.Request[pb.SubscribeRequest], stream *connect.ServerStream[pb.SubscribeResponse]) error {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil {
		err = h.checkTopic(ctx, p, m.Namespace, m.Topic)
	}
	if err != nil {
		return fail(err)
	}
	ch, unsubscribe, err := h.s.store.Subscribe(ctx, m.Topic)
	if err != nil {
		return fail(err)
	}
	defer unsubscribe()
	if err := stream.Send(&pb.SubscribeResponse{Subscribed: true}); err != nil {
		return err
	}
	// A stream that delivers nothing for WorkerStreamIdleTimeout ends with a
	// reconnect: an idle subscription does not hold its place for ever.
	idle := h.s.cfg.Clock.NewTimer(h.s.cfg.WorkerStreamIdleTimeout)
	defer idle.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return stream.Send(&pb.SubscribeResponse{Reconnect: true})
			}
			if err := stream.Send(&pb.SubscribeResponse{}); err != nil {
				return err
			}
			idle.Reset(h.s.cfg.WorkerStreamIdleTimeout)
		case <-idle.C():
			return stream.Send(&pb.SubscribeResponse{Reconnect: true})
		case <-h.s.draining.Done():
			return stream.Send(&pb.SubscribeResponse{Reconnect: true})
		case <-ctx.Done():
			return nil
		}
	}
}

// Heartbeat records the worker.
func (h *workerService) Heartbeat(ctx context.Context, req *connect.Request[pb.HeartbeatRequest]) (*connect.Response[pb.HeartbeatResponse], error) {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil { // the queues it advertises must be its own
		err = checkQueues(p, m.Namespace, m.Queues)
	}
	if err != nil {
		return nil, fail(err)
	}
	err = h.s.store.WorkerHeartbeat(ctx, &store.WorkerHeartbeatParams{Namespace: m.Namespace, Name: m.Name,
		Workflows: m.Workflows, Queues: m.Queues, Versions: ww.VersionsFromPB(m.Versions), Version: m.Version,
		TTL: ww.Duration(m.Ttl), Start: m.Start, Owner: p.Name})
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&pb.HeartbeatResponse{}), nil
}

// ListWorkers lists worker records.
func (h *workerService) ListWorkers(ctx context.Context, req *connect.Request[pb.ListWorkersRequest]) (*connect.Response[pb.ListWorkersResponse], error) {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil {
		err = checkNamespace(p, m.Namespace)
	}
	if err != nil {
		return nil, fail(err)
	}
	ws, err := h.s.store.WorkerList(ctx, &store.WorkerListParams{Namespace: m.Namespace})
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&pb.ListWorkersResponse{Workers: ww.WorkersToPB(ws)}), nil
}

// RemoveWorker deletes a worker record.
func (h *workerService) RemoveWorker(ctx context.Context, req *connect.Request[pb.RemoveWorkerRequest]) (*connect.Response[pb.RemoveWorkerResponse], error) {
	m := req.Msg
	p, err := h.caller(ctx, req.Spec().Procedure, req.Header())
	if err == nil {
		err = checkNamespace(p, m.Namespace)
	}
	if err != nil {
		return nil, fail(err)
	}
	if err := h.s.store.WorkerRemove(ctx, &store.WorkerRemoveParams{Namespace: m.Namespace, Name: m.Name, Owner: p.Name}); err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&pb.RemoveWorkerResponse{}), nil
}

// workerPanic answers a worker call whose handler panicked with an internal
// error, and logs the panic with its stack: without it the call's stream
// would just end, and nothing would say why.
func (s *Server) workerPanic(_ context.Context, spec connect.Spec, _ http.Header, p any) error {
	s.cfg.Logger.Error("worker protocol: handler panicked", "procedure", spec.Procedure, "panic", fmt.Sprint(p),
		"stack", string(debug.Stack()))
	return connect.NewError(connect.CodeInternal, fmt.Errorf("internal error in %s", spec.Procedure))
}
