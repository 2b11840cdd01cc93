// Package storeremote is the worker role of the storage contract
// (store.WorkerStore and store.WorkerRegistry) over the worker protocol of a
// Trellis server (docs/worker-protocol.md): a worker configured with a server
// URL and a token runs its workflows through it and holds no database
// credentials.
//
// Concurrent checkpoints are batched on the wire: while batchesInFlight
// Checkpoint calls are in flight, the checkpoints made meanwhile wait and go
// together in the next (each still fenced by its own lease token, and answered
// on its own). Errors carry the store's sentinels: errors.Is(err,
// store.ErrLeaseLost) holds for a stale lease token as against a store.
package storeremote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	ww "github.com/trellis-dev/trellis/internal/workerwire"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/proto"
)

// Config configures New.
type Config struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:7070". Required.
	URL string
	// Token is the bearer token sent with every call (a principal with role
	// `worker`).
	Token string
	// HTTPClient makes the calls; default one with HTTP/2 over cleartext for
	// http:// URLs and connection reuse.
	HTTPClient *http.Client
	// TLSConfig configures the default HTTPClient's TLS for https:// URLs (a
	// private CA, a client certificate for mutual TLS); ignored when HTTPClient
	// is set.
	TLSConfig *tls.Config
	// Namespace is the worker's namespace: the global topics (ready, cancel)
	// are subscribed to in it. Default "default".
	Namespace string
	// GRPC selects the gRPC protocol instead of Connect's (both are served).
	GRPC bool
	// MaxMessageBytes caps a batch of checkpoints on the wire; default 8 MiB
	// (below the server's default limit).
	MaxMessageBytes int
	// MaxBackoff caps the wait between reconnection attempts; default 5s.
	MaxBackoff time.Duration
}

// Store is the remote worker store. It is safe for concurrent use.
type Store struct {
	cfg Config
	rpc workerv1connect.WorkerServiceClient

	ctx     context.Context // ended by Close: subscriptions and batches stop
	cancel  context.CancelFunc
	senders sync.WaitGroup // the goroutines sending checkpoint batches, while some run

	mu      sync.Mutex
	pending []*ckCall // checkpoints waiting for the next batch
	sending int       // goroutines sending batches, at most batchesInFlight
	closed  bool
}

var (
	_ store.WorkerStore    = (*Store)(nil)
	_ store.WorkerRegistry = (*Store)(nil)
)

// New returns a client of the server at cfg.URL. It connects lazily.
func New(cfg Config) (*Store, error) {
	if cfg.URL == "" {
		return nil, errors.New("storeremote: URL is required")
	}
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("storeremote: URL %q must start with http:// or https://", cfg.URL)
	}
	if cfg.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		if cfg.TLSConfig != nil {
			tr.TLSClientConfig = cfg.TLSConfig.Clone()
		}
		if cfg.GRPC {
			tr.Protocols = new(http.Protocols)
			tr.Protocols.SetUnencryptedHTTP2(true)
			tr.Protocols.SetHTTP2(true)
		}
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 8 << 20
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	opts := []connect.ClientOption{connect.WithInterceptors(bearer(cfg.Token))}
	if cfg.GRPC {
		opts = append(opts, connect.WithGRPC())
	}
	s := &Store{cfg: cfg, rpc: workerv1connect.NewWorkerServiceClient(cfg.HTTPClient, strings.TrimRight(cfg.URL, "/"), opts...)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close ends the subscriptions and the checkpoint batches in flight, and fails
// later calls with store.ErrClosed. Idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.senders.Wait()
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// bearer adds the token to every call.
func bearer(token string) connect.Interceptor {
	return &bearerInterceptor{header: "Bearer " + token, set: token != ""}
}

type bearerInterceptor struct {
	header string
	set    bool
}

func (b *bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b.set {
			req.Header().Set("Authorization", b.header)
		}
		return next(ctx, req)
	}
}

func (b *bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b.set {
			conn.RequestHeader().Set("Authorization", b.header)
		}
		return conn
	}
}

func (b *bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// call runs a unary call and converts its error. A call the server refused
// because it had as many requests in flight as it takes (RATE_LIMITED: nothing
// of it ran) is sent again after a short backoff, a few times.
func call[Req, Res any](s *Store, ctx context.Context, fn func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req) (*Res, error) {
	wait := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if s.isClosed() {
			return nil, store.ErrClosed
		}
		res, err := fn(ctx, connect.NewRequest(msg))
		if err == nil {
			return res.Msg, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		err = ww.FromConnect(err)
		if !errors.Is(err, ww.ErrRateLimited) || attempt == rateLimitedTries {
			return nil, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait *= 2
	}
}

// rateLimitedTries bounds the sends of a call the server refuses as rate limited
// (10 ms, then 20, 40, 80 between them).
const rateLimitedTries = 5

// RunsClaim claims due runs: one Claim without wait.
func (s *Store) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	res := &store.RunsClaimResult{Runs: []*store.ClaimedRun{}}
	_, err := s.claim(ctx, p, 0, func(m *pb.ClaimResponse) {
		res.Runs = append(res.Runs, ww.ClaimedFromPB(m.Runs)...)
		res.NextDue = ww.TimePtr(m.NextDue)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ClaimPush opens a Claim stream with credit p.Max that stays open up to wait:
// the server claims runs for the worker as they become due and pushes them;
// deliver is called with each run on the caller's goroutine. It returns when
// the credit is used up, the wait is over (nil error), the server asks the
// worker to reconnect (nil error, reconnect true), or on an error.
func (s *Store) ClaimPush(ctx context.Context, p *store.RunsClaimParams, wait time.Duration, deliver func(*store.ClaimedRun)) (reconnect bool, err error) {
	return s.claim(ctx, p, wait, func(m *pb.ClaimResponse) {
		for _, cr := range ww.ClaimedFromPB(m.Runs) {
			deliver(cr)
		}
	})
}

func (s *Store) claim(ctx context.Context, p *store.RunsClaimParams, wait time.Duration, each func(*pb.ClaimResponse)) (reconnect bool, err error) {
	if s.isClosed() {
		return false, store.ErrClosed
	}
	stream, err := s.rpc.Claim(ctx, connect.NewRequest(&pb.ClaimRequest{Namespace: p.Namespace, Queues: p.Queues,
		Workflows: p.Workflows, Versions: ww.VersionsToPB(p.Versions), Worker: p.Worker, Credit: int64(p.Max),
		LeaseDuration: ww.Dur(p.LeaseDuration), Wait: ww.Dur(wait)}))
	if err != nil {
		return false, s.streamErr(ctx, err)
	}
	defer stream.Close()
	for stream.Receive() {
		m := stream.Msg()
		each(m)
		reconnect = reconnect || m.Reconnect
	}
	if err := stream.Err(); err != nil && !errors.Is(err, io.EOF) {
		return false, s.streamErr(ctx, err)
	}
	return reconnect, nil
}

func (s *Store) streamErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.isClosed() {
		return store.ErrClosed
	}
	return ww.FromConnect(err)
}

// LeasesExtend extends a batch of leases in one call.
func (s *Store) LeasesExtend(ctx context.Context, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	req := &pb.ExtendLeasesRequest{Duration: ww.Dur(p.Duration)}
	for _, l := range p.Leases {
		req.Leases = append(req.Leases, ww.LeaseToPB(l))
	}
	for _, st := range p.Steps {
		req.Steps = append(req.Steps, ww.StepToPB(st))
	}
	res, err := call(s, ctx, s.rpc.ExtendLeases, req)
	if err != nil {
		return nil, err
	}
	return &store.LeasesExtendResult{Lost: res.Lost, CancelRequested: res.CancelRequested}, nil
}

// LeaseRelease hands a run back.
// A guarded release (with a Seq) whose answer was lost is sent again with
// backoff while ctx lasts.
func (s *Store) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	req := &pb.ReleaseLeaseRequest{Lease: ww.LeaseToPB(p.Lease), Seq: p.Seq}
	return s.resendLost(ctx, func() error {
		_, err := call(s, ctx, s.rpc.ReleaseLease, req)
		return err
	}, func(error) bool { return p.Seq > 0 })
}

// ckCall is one checkpoint waiting for its batch.
type ckCall struct {
	item *pb.CheckpointItem
	size int
	done chan struct{}
	res  *store.CheckpointResult
	err  error
}

// Checkpoint saves a checkpoint, batched with the concurrent ones (see the
// package doc).
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	c := &ckCall{item: ww.CheckpointToPB(p), done: make(chan struct{})}
	c.size = proto.Size(c.item)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, store.ErrClosed
	}
	s.pending = append(s.pending, c)
	if s.sending < batchesInFlight {
		// The sender goroutines are owned by the store: each ends when
		// nothing is pending, and Close waits for them. Callers only wait
		// for their own result, or their context.
		s.sending++
		s.senders.Go(s.sendBatches)
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// batchesInFlight is how many Checkpoint calls a store has on the wire at
// once. With one, a batch's round trip (the server's durable commit included)
// left the server's writer idle while the next batch gathered: w1 through a
// server on SQLite (n = 20,000) ran about 6% faster with two (nine alternated
// pairs, docs/benchmarks.md). A run's checkpoints are made one after another,
// so two batches never hold checkpoints of one run.
const batchesInFlight = 2

// sendBatches sends the pending checkpoints in batches until none is left.
func (s *Store) sendBatches() {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.sending--
			s.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(s.pending) && n < 1000 && (n == 0 || size+s.pending[n].size <= s.cfg.MaxMessageBytes) {
			size += s.pending[n].size
			n++
		}
		batch := s.pending[:n:n]
		s.pending = s.pending[n:]
		s.mu.Unlock()
		s.sendBatch(batch)
	}
}

// checkpointTimeout bounds one batch on the wire.
const checkpointTimeout = time.Minute

// sendBatch sends a batch of checkpoints and answers each. When the answer is
// lost (the connection broke: the server restarted, say), the guarded ones
// (with a Seq: the store applies each once) are sent again with backoff until
// checkpointTimeout, and the others fail: they may or may not have been applied.
func (s *Store) sendBatch(batch []*ckCall) {
	ctx, cancel := context.WithTimeout(s.ctx, checkpointTimeout)
	defer cancel()
	var res *pb.CheckpointResponse
	err := s.resendLost(ctx, func() (err error) {
		req := &pb.CheckpointRequest{Checkpoints: make([]*pb.CheckpointItem, len(batch))}
		for i, c := range batch {
			req.Checkpoints[i] = c.item
		}
		res, err = call(s, ctx, s.rpc.Checkpoint, req)
		return err
	}, func(lost error) bool {
		guarded := batch[:0:0]
		for _, c := range batch {
			if c.item.Seq > 0 {
				guarded = append(guarded, c)
				continue
			}
			c.err = lost
			close(c.done)
		}
		batch = guarded
		return len(batch) > 0
	})
	if len(batch) > 0 {
		s.answerBatch(batch, res, err)
	}
}

// resendLost calls send until its answer is not lost (lostAnswer), the store
// closes, ctx ends, or again (asked before each new send, with the lost
// answer's error) says not to. It waits with backoff between sends and returns
// send's last error.
func (s *Store) resendLost(ctx context.Context, send func() error, again func(lost error) bool) error {
	for wait := lostAnswerBackoff; ; wait = min(2*wait, maxLostAnswerBackoff) {
		err := send()
		if err == nil || !lostAnswer(err) || s.isClosed() || !again(err) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// The waits between the sends of a guarded write whose answer was lost.
const (
	lostAnswerBackoff    = 50 * time.Millisecond
	maxLostAnswerBackoff = time.Second
)

// lostAnswer reports an error that says nothing of whether the server applied
// the call: the connection failed (no error detail from the server), or the
// server was stopping.
func lostAnswer(err error) bool {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeUnknown
	}
	return errors.Is(err, store.ErrClosed)
}

// answerBatch answers each checkpoint of batch from the response res or the
// call's error.
func (s *Store) answerBatch(batch []*ckCall, res *pb.CheckpointResponse, err error) {
	if err == nil && len(res.Results) != len(batch) {
		err = fmt.Errorf("storeremote: server answered %d results to %d checkpoints", len(res.Results), len(batch))
	}
	for i, c := range batch {
		switch {
		case err != nil:
			c.err = err
		case res.Results[i].Error != nil:
			c.err = ww.FromDetail(res.Results[i].Error)
		default:
			r := res.Results[i]
			c.res = &store.CheckpointResult{CancelRequested: r.CancelRequested, At: ww.Time(r.At), Replayed: r.Replayed,
				RetryAt: ww.TimePtr(r.RetryAt)}
		}
		close(c.done)
	}
}

// RunsResumeBlocked resumes the blocked runs of workflows. A worker calls it
// as it registers workflows; a call whose answer was lost (the server, or
// its store's writer, changing) is sent again for up to resumePatience:
// resuming again resumes what is still blocked, nothing twice.
func (s *Store) RunsResumeBlocked(ctx context.Context, p *store.RunsResumeBlockedParams) (int, error) {
	var res *pb.ResumeBlockedResponse
	giveUp := time.Now().Add(resumePatience)
	err := s.resendLost(ctx, func() (err error) {
		res, err = call(s, ctx, s.rpc.ResumeBlocked, &pb.ResumeBlockedRequest{Namespace: p.Namespace, Workflows: p.Workflows, Queues: p.Queues})
		return err
	}, func(error) bool { return time.Now().Before(giveUp) })
	if err != nil {
		return 0, err
	}
	return int(res.Resumed), nil
}

// resumePatience bounds the resends of RunsResumeBlocked.
const resumePatience = 30 * time.Second

// HistoryList reads a run's ops.
func (s *Store) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	res, err := call(s, ctx, s.rpc.ListHistory, &pb.ListHistoryRequest{Namespace: p.Namespace, Ref: p.Ref})
	if err != nil {
		return nil, err
	}
	return ww.OpsFromPB(res.Ops), nil
}

// RunChildren reads the children one op of a parent started.
func (s *Store) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	res, err := call(s, ctx, s.rpc.ListChildren, &pb.ListChildrenRequest{Namespace: p.Namespace, Parent: p.Parent, Position: int64(p.Position)})
	if err != nil {
		return nil, err
	}
	return ww.RunsFromPB(res.Runs), nil
}

// WorkerHeartbeat creates or refreshes a worker's record.
func (s *Store) WorkerHeartbeat(ctx context.Context, p *store.WorkerHeartbeatParams) error {
	_, err := call(s, ctx, s.rpc.Heartbeat, &pb.HeartbeatRequest{Namespace: p.Namespace, Name: p.Name, Workflows: p.Workflows,
		Queues: p.Queues, Versions: ww.VersionsToPB(p.Versions), Version: p.Version, Ttl: ww.Dur(p.TTL), Start: p.Start})
	return err
}

// WorkerList lists a namespace's worker records.
func (s *Store) WorkerList(ctx context.Context, p *store.WorkerListParams) ([]*store.Worker, error) {
	res, err := call(s, ctx, s.rpc.ListWorkers, &pb.ListWorkersRequest{Namespace: p.Namespace})
	if err != nil {
		return nil, err
	}
	return ww.WorkersFromPB(res.Workers), nil
}

// WorkerRemove deletes a worker's record.
func (s *Store) WorkerRemove(ctx context.Context, p *store.WorkerRemoveParams) error {
	_, err := call(s, ctx, s.rpc.RemoveWorker, &pb.RemoveWorkerRequest{Namespace: p.Namespace, Name: p.Name})
	return err
}

// Subscribe subscribes to a topic over a Subscribe stream. It returns once
// the server has subscribed, so every change committed after it returns is
// signalled. When the stream breaks (the server restarts), a goroutine owned
// by the subscription reconnects with backoff and signals once reconnected,
// since changes may have been missed meanwhile. The subscription ends with
// ctx, its cancel function or Close.
func (s *Store) Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if s.isClosed() {
		return nil, nil, store.ErrClosed
	}
	ns := namespaceOf(topic)
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	stream, err := s.subscribe(sctx, ns, topic)
	if err != nil {
		stop()
		cancel()
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.pump(sctx, ns, topic, stream, ch)
	}()
	return ch, func() { cancel(); stop(); <-done }, nil
}

// namespaceOf is the namespace a topic is authorized on: a run topic's own;
// for the global topics, the worker's, which the caller cannot pass through
// the contract's Subscribe: it is carried in the context (WithNamespace).
func namespaceOf(topic string) string {
	if rest, ok := strings.CutPrefix(topic, "run:"); ok {
		if ns, _, ok := strings.Cut(rest, "/"); ok {
			return ns
		}
	}
	return ""
}

type subStream = connect.ServerStreamForClient[pb.SubscribeResponse]

// subscribe opens a stream and waits for its acknowledgement.
func (s *Store) subscribe(ctx context.Context, ns, topic string) (*subStream, error) {
	if ns == "" {
		ns = s.Namespace()
	}
	stream, err := s.rpc.Subscribe(ctx, connect.NewRequest(&pb.SubscribeRequest{Namespace: ns, Topic: topic}))
	if err != nil {
		return nil, s.streamErr(ctx, err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		if err == nil {
			err = fmt.Errorf("%w: subscription ended before it was acknowledged", store.ErrClosed)
		}
		return nil, s.streamErr(ctx, err)
	}
	return stream, nil
}

// pump forwards signals, reconnecting with backoff when the stream ends.
func (s *Store) pump(ctx context.Context, ns, topic string, stream *subStream, ch chan struct{}) {
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	for {
		for stream.Receive() {
			if !stream.Msg().Reconnect {
				signal()
			}
		}
		stream.Close()
		for attempt := 0; ; attempt++ {
			if !s.sleep(ctx, attempt) {
				return
			}
			var err error
			if stream, err = s.subscribe(ctx, ns, topic); err == nil {
				break
			}
		}
		signal() // changes may have been missed while disconnected
	}
}

// backoff is the wait before reconnection attempt n (0-based): exponential
// from 50ms up to maxWait, with jitter.
func backoff(n int, maxWait time.Duration) time.Duration {
	d := 50 * time.Millisecond << min(n, 10)
	d = min(d, maxWait)
	return d/2 + rand.N(d/2+1)
}

// sleep waits the backoff of attempt n; false when ctx ended first.
func (s *Store) sleep(ctx context.Context, n int) bool {
	t := time.NewTimer(backoff(n, s.cfg.MaxBackoff))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Namespace is the namespace global topics (ready, cancel) are subscribed in:
// Config.Namespace, default "default".
func (s *Store) Namespace() string {
	if s.cfg.Namespace == "" {
		return "default"
	}
	return s.cfg.Namespace
}
