package trellis

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/trellis-dev/trellis/internal/servermetrics"
	"github.com/trellis-dev/trellis/store"
)

// Metrics are the Prometheus metrics of a client, its worker and its store, in a
// registry of their own (with the Go runtime's and the process's). Pass it to
// Config.Metrics of one client and serve Handler; `trellis server` serves it at
// /metrics. docs/observability.md lists the metrics.
type Metrics struct {
	reg *prometheus.Registry

	runsStarted  *prometheus.CounterVec   // workflow
	runsEnded    *prometheus.CounterVec   // workflow, status
	executions   *prometheus.CounterVec   // workflow, status
	stepAttempts *prometheus.CounterVec   // workflow, outcome
	stepSeconds  *prometheus.HistogramVec // workflow
	commitSize   prometheus.Histogram
	commitSecs   prometheus.Histogram
	claimSecs    prometheus.Histogram
	subscribers  prometheus.Gauge

	// byWorkflow caches the children of one workflow's labels: a step attempt
	// looks up nothing but this map, and not even that when its workflow is
	// the one last looked up.
	byWorkflow sync.Map // workflow -> *workflowMetrics
	last       atomic.Pointer[workflowMetrics]

	handlerOnce sync.Once
	handler     http.Handler

	mu      sync.Mutex
	sources []*metricsSource // attached clients and observed stores: read at scrape time
	// committing are the stores whose commits these metrics observe.
	committing map[store.Store]*commitWatch
}

type workflowMetrics struct {
	name       string
	started    prometheus.Counter
	stepOK     prometheus.Counter
	stepFailed prometheus.Counter
	stepSecs   prometheus.Observer
	ended      statusCounters
	executions statusCounters
}

// statusCounters are the children of a counter vector for one workflow, by the
// status label, made when first counted.
type statusCounters [len(statusLabels)]atomic.Pointer[prometheus.Counter]

// statusLabels are the status label's values: the statuses an attempt leaves a
// run in, and "lost" when it saved none.
var statusLabels = [...]string{"lost", "pending", "running", "waiting", "blocked", "succeeded", "failed", "cancelled"}

// statusLabel is st's index in statusLabels ("lost" for ""); -1 for a status
// it does not know.
func statusLabel(st Status) int {
	label := string(st)
	if label == "" {
		label = "lost"
	}
	return slices.Index(statusLabels[:], label)
}

var (
	descRuns    = prometheus.NewDesc("trellis_runs", "Unfinished runs in the store by namespace, queue and status (read at scrape time).", []string{"namespace", "queue", "status"}, nil)
	descLeases  = prometheus.NewDesc("trellis_active_leases", "Leases held: runs the embedded workers of this process execute, and on a server the runs its remote workers hold through it.", nil, nil)
	descWorkers = prometheus.NewDesc("trellis_workers_connected", "Live workers by namespace (read at scrape time).", []string{"namespace"}, nil)
)

// NewMetrics returns a set of metrics in a new registry.
func NewMetrics() *Metrics {
	secs := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_runs_started_total",
			Help: "Runs started through this client (Start, StartRaw, StartMany, the server's start routes) and by schedules (fired, triggered, backfilled)."}, []string{"workflow"}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_runs_ended_total",
			Help: "Runs this client's worker ended, by final status; on a server, also those its remote workers ended through it."}, []string{"workflow", "status"}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_run_attempts_total",
			Help: "Executions (claims) of runs by this worker (on a server, also by its remote workers), by the status each left the run in (\"lost\" when none was saved)."}, []string{"workflow", "status"}),
		stepAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_step_attempts_total",
			Help: "Step attempts executed, by outcome (ok, error; lost and timed_out: ended without their worker, recorded by the claim that took the run back)."}, []string{"workflow", "outcome"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_step_attempt_duration_seconds",
			Help: "Duration of step attempts.", Buckets: secs}, []string{"workflow"}),
		commitSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_store_commit_batch_size",
			Help: "Write requests (checkpoints, creates, ...) per group commit of the store.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		commitSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_store_commit_seconds",
			Help: "Latency of the store's group commits.", Buckets: secs}),
		claimSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_claim_seconds",
			Help: "Latency of the claim queries of the embedded workers and, on a server, of those it makes for its remote workers.", Buckets: secs}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_stream_subscribers",
			Help: "Open event-stream subscriptions."}),
	}
	m.reg.MustRegister(m.runsStarted, m.runsEnded, m.executions, m.stepAttempts, m.stepSeconds,
		m.commitSize, m.commitSecs, m.claimSecs, m.subscribers, (*scrapeCollector)(m),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	m.handlerOnce.Do(func() { m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}) })
	return m.handler
}

// Registry is the registry of the metrics, for adding one's own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// serverObserver is the servermetrics.Observer of a server's Metrics: what a
// server records that a client does not (internal/servermetrics).
type serverObserver struct{ m *Metrics }

func init() {
	servermetrics.For = func(metrics any) servermetrics.Observer { return serverObserver{metrics.(*Metrics)} }
}

// AddStreamSubscribers adds delta (negative when they leave) to the gauge of
// open event-stream subscriptions.
func (o serverObserver) AddStreamSubscribers(delta int) { o.m.subscribers.Add(float64(delta)) }

func (m *Metrics) workflow(name string) *workflowMetrics {
	if w := m.last.Load(); w != nil && w.name == name {
		return w
	}
	if w, ok := m.byWorkflow.Load(name); ok {
		m.last.Store(w.(*workflowMetrics))
		return w.(*workflowMetrics)
	}
	w := &workflowMetrics{
		name:       name,
		started:    m.runsStarted.WithLabelValues(name),
		stepOK:     m.stepAttempts.WithLabelValues(name, "ok"),
		stepFailed: m.stepAttempts.WithLabelValues(name, "error"),
		stepSecs:   m.stepSeconds.WithLabelValues(name),
	}
	got, _ := m.byWorkflow.LoadOrStore(name, w)
	m.last.Store(got.(*workflowMetrics))
	return got.(*workflowMetrics)
}

// attemptEnded counts a run attempt of w that left its run in st.
func (m *Metrics) attemptEnded(w *workflowMetrics, st Status) {
	m.counter(&w.executions, m.executions, w.name, st).Inc()
	if st.Terminal() {
		m.counter(&w.ended, m.runsEnded, w.name, st).Inc()
	}
}

// stepEnded counts a step attempt of w that took d.
func (w *workflowMetrics) stepEnded(ok bool, d time.Duration) {
	w.stepSecs.Observe(d.Seconds())
	if ok {
		w.stepOK.Inc()
	} else {
		w.stepFailed.Inc()
	}
}

// counter is the child of vec for workflow and status st, kept in cache.
func (m *Metrics) counter(cache *statusCounters, vec *prometheus.CounterVec, workflow string, st Status) prometheus.Counter {
	i := statusLabel(st)
	if i < 0 {
		return vec.WithLabelValues(workflow, string(st))
	}
	if c := cache[i].Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(workflow, statusLabels[i])
	cache[i].Store(&c) // a racing store keeps the same child: the vector made it once
	return c
}

// interceptor is the built-in metrics interceptor.
func (m *Metrics) interceptor() Interceptor {
	return Interceptor{
		workflowDone: func(_ context.Context, a *WorkflowAttempt) {
			m.attemptEnded(m.workflow(a.Workflow), a.Status)
		},
		stepDone: func(_ context.Context, s *StepCall, err error, d time.Duration) {
			m.workflow(s.Workflow).stepEnded(err == nil, d)
		},
		callDone: func(_ context.Context, c *ClientCall, err error) {
			if c.Method == "Start" && err == nil {
				m.workflow(c.Workflow).started.Inc()
			}
		},
	}
}

// attach makes the metrics observe an embedded client: its store's commits, its
// worker's claims and leases, and the store's counts at scrape time.
func (m *Metrics) attach(e *embedded) {
	m.observeCommits(e.store)
	src := &metricsSource{client: e, store: e.store, keys: []any{e.database()}, namespace: e.cfg.Namespace, logger: e.cfg.Logger}
	if e.worker != nil {
		src.leases = e.worker.Executing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, src)
}

// detach stops reading a client that closes.
func (m *Metrics) detach(e *embedded) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = slices.DeleteFunc(m.sources, func(s *metricsSource) bool { return s.client == e })
	m.unobserveCommits(e.store)
}

func (m *Metrics) observeCommits(st store.Store) {
	co, ok := st.(store.CommitObserver)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.committing[st]; w != nil { // a store's observers add up: count its commits once
		w.users++
		return
	}
	if m.committing == nil {
		m.committing = map[store.Store]*commitWatch{}
	}
	m.committing[st] = &commitWatch{users: 1, stop: co.ObserveCommits(func(n int, d time.Duration) {
		m.commitSize.Observe(float64(n))
		m.commitSecs.Observe(d.Seconds())
	})}
}

// commitWatch is the observation of one store's commits, shared by the
// clients and ObserveStore calls on that store.
type commitWatch struct {
	users int
	stop  func()
}

// unobserveCommits ends one use of a store's observation (observeCommits),
// the observation with the last; m.mu is held.
func (m *Metrics) unobserveCommits(st store.Store) {
	if w := m.committing[st]; w != nil {
		if w.users--; w.users == 0 {
			w.stop()
			delete(m.committing, st)
		}
	}
}

// ObserveStore makes the metrics cover a store that no client of theirs opened,
// as `trellis server` does with its store from the moment it starts: the
// store's group commits (trellis_store_commit_*), and at scrape time its
// unfinished runs (trellis_runs) and the live workers of every namespace
// (trellis_workers_connected, for stores that implement store.WorkerCounter;
// else only of the namespaces of the clients attached). Clients on the same
// store (Config.Backend) or URL are not counted twice. stop ends it, and the
// commits' observation once no client of these metrics uses the store either.
func (o serverObserver) ObserveStore(st servermetrics.Store) (stop func()) {
	return o.m.observeStore(st)
}

func (m *Metrics) observeStore(o servermetrics.Store) (stop func()) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	m.observeCommits(o.Store)
	src := &metricsSource{store: o.Store, keys: []any{o.Store}, all: true, leases: o.ActiveLeases, logger: o.Logger}
	if o.URL != "" {
		src.keys = append(src.keys, o.URL)
	}
	m.mu.Lock()
	// Stores first: a client matches the group of its store's database.
	m.sources = append([]*metricsSource{src}, m.sources...)
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.sources = slices.DeleteFunc(m.sources, func(s *metricsSource) bool { return s == src })
			m.unobserveCommits(o.Store)
		})
	}
}

// ObserveClaim records the latency of a claim query made for workers
// elsewhere (trellis_claim_seconds): `trellis server` calls it for the claims
// of its remote workers. Embedded workers' claims are recorded without it.
func (o serverObserver) ObserveClaim(d time.Duration) { o.m.observeClaim(d) }

func (m *Metrics) observeClaim(d time.Duration) { m.claimSecs.Observe(d.Seconds()) }

// ObserveEndedAttempts counts step attempts that a claim recorded as lost or
// timed out (trellis_step_attempts_total, outcome "lost" or "timed_out"):
// their workers could not. Embedded workers count those of their own claims;
// `trellis server` calls it for the claims of its remote workers.
func (o serverObserver) ObserveEndedAttempts(ended []store.EndedAttemptInfo) {
	o.m.observeEndedAttempts(ended)
}

func (m *Metrics) observeEndedAttempts(ended []store.EndedAttemptInfo) {
	for _, a := range ended {
		m.stepAttempts.WithLabelValues(a.Workflow, a.Outcome).Inc()
	}
}

// ObserveRemoteCheckpoint counts what a checkpoint a remote worker made
// through this process wrote, as the worker's own metrics count it: its step
// attempts (trellis_step_attempts_total and their durations: each failed
// attempt it records, each step it completes) and, when it ended the worker's
// lease, the run attempt (trellis_run_attempts_total) and a final status
// (trellis_runs_ended_total). `trellis server` calls it for each checkpoint
// its remote workers send that the store applied (not for a retry the store
// answered as applied already), so its metrics count the runs its workers end.
func (o serverObserver) ObserveRemoteCheckpoint(workflow string, p *store.CheckpointParams) {
	m := o.m
	w := m.workflow(workflow)
	for i := range p.Attempts {
		a := &p.Attempts[i]
		if a.Outcome == store.AttemptStarted {
			continue // an attempt's start, not its end
		}
		w.stepEnded(false, a.FinishedAt.Sub(a.StartedAt))
	}
	for _, op := range p.Ops {
		if op.Kind != store.OpStep || !op.Done || op.Error != nil || op.FinishedAt == nil {
			continue // a failed step's last attempt is among p.Attempts
		}
		start := op.StartedAt
		if op.AttemptStartedAt != nil {
			start = *op.AttemptStartedAt
		}
		w.stepEnded(true, op.FinishedAt.Sub(start))
	}
	if p.Status != store.StatusRunning {
		m.attemptEnded(w, Status(p.Status))
	}
}

// ObserveStarted counts a run of workflow started by this process other than
// through a client call (trellis_runs_started_total): `trellis server` calls
// it for each run its scheduler fires. A client's own scheduler and its calls
// count theirs without it.
func (o serverObserver) ObserveStarted(workflow string) { o.m.observeStarted(workflow) }

func (m *Metrics) observeStarted(workflow string) { m.workflow(workflow).started.Inc() }

// ObserveRemoteRelease counts a run attempt that a remote worker ended by
// handing its run back through this process (trellis_run_attempts_total,
// status pending).
func (o serverObserver) ObserveRemoteRelease(workflow string) {
	o.m.attemptEnded(o.m.workflow(workflow), StatusPending)
}

// metricsSource is what the scrape reads: an attached client or an observed store.
type metricsSource struct {
	client    *embedded // nil for an observed store
	store     store.Store
	keys      []any  // identities of its database: the store, its URL
	namespace string // a client's namespace
	all       bool   // an observed store: count the workers of every namespace
	leases    func() int
	logger    *slog.Logger
}

// database is the sources on one database.
type database struct {
	keys    []any
	sources []*metricsSource
}

// databases groups sources by database: those sharing a key are one.
func databases(sources []*metricsSource) []*database {
	var dbs []*database
	for _, src := range sources {
		i := slices.IndexFunc(dbs, func(db *database) bool {
			return slices.ContainsFunc(src.keys, func(k any) bool { return slices.Contains(db.keys, k) })
		})
		if i < 0 {
			dbs = append(dbs, &database{})
			i = len(dbs) - 1
		}
		db := dbs[i]
		for _, k := range src.keys {
			if !slices.Contains(db.keys, k) {
				db.keys = append(db.keys, k)
			}
		}
		db.sources = append(db.sources, src)
	}
	return dbs
}

// scrapeCollector collects the gauges read at scrape time.
type scrapeCollector Metrics

func (s *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRuns
	ch <- descLeases
	ch <- descWorkers
}

// runKey is a series of trellis_runs.
type runKey struct {
	namespace, queue string
	status           store.Status
}

// Collect reads the gauges. Sources that share a database (a worker and a
// server in one process, each with its store) have its runs and workers
// counted once, and those of several databases are added up, since a gauge's
// series may be reported only once per scrape.
func (s *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	sources := slices.Clone(s.sources)
	s.mu.Unlock()
	if len(sources) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	leases := 0
	runs := map[runKey]int64{}
	workers := map[string]int64{} // namespace → live workers, over the databases
	for _, db := range databases(sources) {
		for _, src := range db.sources {
			if src.leases != nil {
				leases += src.leases()
			}
		}
		db.countRuns(ctx, runs)
		db.countWorkers(ctx, workers)
	}
	for ns, n := range workers {
		ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(n), ns)
	}
	for k, n := range runs {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(n), k.namespace, k.queue, string(k.status))
	}
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(leases))
}

// countRuns adds the database's unfinished runs to runs.
func (db *database) countRuns(ctx context.Context, runs map[runKey]int64) {
	for _, src := range db.sources {
		rc, ok := src.store.(store.QueueCounter)
		if !ok {
			continue
		}
		counts, err := rc.QueueCounts(ctx)
		if err != nil {
			src.logger.Warn("metrics: counting runs", "err", err)
		}
		for _, n := range counts {
			runs[runKey{n.Namespace, n.Queue, n.Status}] += n.Count
		}
		return
	}
}

// countWorkers adds the database's live workers to workers: of every
// namespace when a source observes the whole store, else of each client's.
func (db *database) countWorkers(ctx context.Context, workers map[string]int64) {
	for _, src := range db.sources {
		wc, ok := src.store.(store.WorkerCounter)
		if !src.all || !ok {
			continue
		}
		counts, err := wc.WorkerCounts(ctx)
		if err != nil {
			src.logger.Warn("metrics: counting workers", "err", err)
			break // count the clients' namespaces instead
		}
		for _, n := range counts {
			workers[n.Namespace] += n.Count
		}
		return
	}
	read := map[string]bool{}
	for _, src := range db.sources {
		if src.client == nil || read[src.namespace] {
			continue
		}
		read[src.namespace] = true
		if live, err := src.client.liveWorkers(ctx); err == nil {
			workers[src.namespace] += int64(live)
		}
	}
}

// database identifies the database of the client's store for the metrics: its
// URL, or the store itself when the client was given one (Config.Backend).
func (e *embedded) database() any {
	if e.cfg.Backend == nil && e.cfg.Store != "" {
		return e.cfg.Store
	}
	return e.store
}

// scrapeTimeout bounds the store queries of one scrape.
const scrapeTimeout = 5 * time.Second

// liveWorkers counts the live workers of the client's namespace.
func (e *embedded) liveWorkers(ctx context.Context) (int, error) {
	ws, err := e.store.WorkerList(ctx, &store.WorkerListParams{Namespace: e.cfg.Namespace})
	if err != nil {
		return 0, err
	}
	live := 0
	for _, w := range ws {
		if w.Live {
			live++
		}
	}
	return live, nil
}
