package trellis

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	clients []*Client // attached: read at scrape time
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

// statusLabel is st's index in statusLabels; -1 for a status it does not know.
func statusLabel(st Status) int {
	switch st {
	case "":
		return 0
	case StatusPending:
		return 1
	case StatusRunning:
		return 2
	case StatusWaiting:
		return 3
	case StatusBlocked:
		return 4
	case StatusSucceeded:
		return 5
	case StatusFailed:
		return 6
	case StatusCancelled:
		return 7
	}
	return -1
}

var (
	descRuns    = prometheus.NewDesc("trellis_runs", "Unfinished runs in the store by namespace, queue and status (read at scrape time).", []string{"namespace", "queue", "status"}, nil)
	descLeases  = prometheus.NewDesc("trellis_active_leases", "Runs the workers of this process hold a lease on and execute.", nil, nil)
	descWorkers = prometheus.NewDesc("trellis_workers_connected", "Live workers by namespace (read at scrape time).", []string{"namespace"}, nil)
)

// NewMetrics returns a set of metrics in a new registry.
func NewMetrics() *Metrics {
	secs := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_runs_started_total",
			Help: "Runs started through this client (Start, StartRaw, StartMany, the server's start routes)."}, []string{"workflow"}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_runs_ended_total",
			Help: "Runs this client's worker ended, by final status."}, []string{"workflow", "status"}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_run_attempts_total",
			Help: "Executions (claims) of runs by this worker, by the status each left the run in (\"lost\" when none was saved)."}, []string{"workflow", "status"}),
		stepAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_step_attempts_total",
			Help: "Step attempts executed, by outcome (ok, error)."}, []string{"workflow", "outcome"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_step_attempt_duration_seconds",
			Help: "Duration of step attempts.", Buckets: secs}, []string{"workflow"}),
		commitSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_store_commit_batch_size",
			Help: "Write requests (checkpoints, creates, ...) per group commit of the store.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		commitSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_store_commit_seconds",
			Help: "Latency of the store's group commits.", Buckets: secs}),
		claimSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_claim_seconds",
			Help: "Latency of the worker's claim queries.", Buckets: secs}),
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

// AddStreamSubscribers adds delta (negative when they leave) to the gauge of
// open event-stream subscriptions.
func (m *Metrics) AddStreamSubscribers(delta int) { m.subscribers.Add(float64(delta)) }

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
			w := m.workflow(a.Workflow)
			m.counter(&w.executions, m.executions, a.Workflow, a.Status).Inc()
			if a.Status.Terminal() {
				m.counter(&w.ended, m.runsEnded, a.Workflow, a.Status).Inc()
			}
		},
		stepDone: func(_ context.Context, s *StepCall, err error, d time.Duration) {
			w := m.workflow(s.Workflow)
			w.stepSecs.Observe(d.Seconds())
			if err != nil {
				w.stepFailed.Inc()
			} else {
				w.stepOK.Inc()
			}
		},
		callDone: func(_ context.Context, c *ClientCall, err error) {
			if c.Method == "Start" && err == nil {
				m.workflow(c.Workflow).started.Inc()
			}
		},
	}
}

// attach makes the metrics observe a client: its store's commits, its
// worker's claims and leases, and the store's counts at scrape time.
func (m *Metrics) attach(c *Client) {
	if co, ok := c.store.(store.CommitObserver); ok {
		co.ObserveCommits(func(n int, d time.Duration) {
			m.commitSize.Observe(float64(n))
			m.commitSecs.Observe(d.Seconds())
		})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clients = append(m.clients, c)
}

// detach stops reading a client that closes.
func (m *Metrics) detach(c *Client) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clients = slices.DeleteFunc(m.clients, func(x *Client) bool { return x == c })
}

// observeClaim is the worker's OnClaim.
func (m *Metrics) observeClaim(d time.Duration, _ int) { m.claimSecs.Observe(d.Seconds()) }

// scrapeCollector collects the gauges read at scrape time.
type scrapeCollector Metrics

func (s *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRuns
	ch <- descLeases
	ch <- descWorkers
}

func (s *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	clients := slices.Clone(s.clients)
	s.mu.Unlock()
	if len(clients) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	leases := 0
	// Clients that share these metrics may share a database (a worker and a
	// server in one process, each with its store): its runs are counted once,
	// and runs of several databases are added up, since a gauge's series may
	// be reported only once per scrape.
	counted := map[any]bool{} // databases counted: their URL, else their store
	type runKey struct {
		namespace, queue string
		status           store.Status
	}
	runs := map[runKey]int64{}
	type nsKey struct {
		database  any
		namespace string
	}
	read := map[nsKey]bool{}    // each database's workers of a namespace once
	workers := map[string]int{} // namespace → live workers, over the databases
	for _, c := range clients {
		if c.worker != nil {
			leases += c.worker.Executing()
		}
		db := c.database()
		if rc, ok := c.store.(store.QueueCounter); ok && !counted[db] {
			counted[db] = true
			counts, err := rc.QueueCounts(ctx)
			if err != nil {
				c.cfg.Logger.Warn("metrics: counting runs", "err", err)
			}
			for _, n := range counts {
				runs[runKey{n.Namespace, n.Queue, n.Status}] += n.Count
			}
		}
		if k := (nsKey{db, c.cfg.Namespace}); !read[k] {
			read[k] = true
			if live, err := c.liveWorkers(ctx); err == nil {
				workers[k.namespace] += live
			}
		}
	}
	for ns, n := range workers {
		ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(n), ns)
	}
	for k, n := range runs {
		ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(n), k.namespace, k.queue, string(k.status))
	}
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(leases))
}

// database identifies the database of the client's store for the metrics: its
// URL, or the store itself when the client was given one (Config.Backend).
func (c *Client) database() any {
	if c.cfg.Backend == nil && c.cfg.Store != "" {
		return c.cfg.Store
	}
	return c.store
}

// scrapeTimeout bounds the store queries of one scrape.
const scrapeTimeout = 5 * time.Second

// liveWorkers counts the live workers of the client's namespace.
func (c *Client) liveWorkers(ctx context.Context) (int, error) {
	ws, err := c.store.WorkerList(ctx, &store.WorkerListParams{Namespace: c.cfg.Namespace})
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
