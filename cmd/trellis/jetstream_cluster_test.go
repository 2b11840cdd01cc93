package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/testport"
)

// jsFailoverBound is how soon after the writer's SIGKILL a start must be
// acknowledged through a surviving server (issue 39).
const jsFailoverBound = 10 * time.Second

// Three `trellis server` processes on one jetstream: store, each embedding a
// NATS server of one cluster (the log kept three times), a remote worker and
// clients starting runs (with Idempotency-Keys) on each. The server holding
// the writer lease is SIGKILLed three times while runs are started and run,
// and restarted on its directory each time, to rejoin as a follower. Every
// start acknowledged with a 2xx succeeds, each of its steps recorded once,
// and after each kill a start through a surviving server is acknowledged
// within jsFailoverBound (the interval is logged as "failover: X").
func TestJetStreamClusterLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes forming a JetStream cluster")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	cl := startJSCluster(t)
	defer cl.stop(t)

	for _, n := range cl.nodes {
		w := startKillStepsWorker(t, n.base(), "")
		defer w.Client().Close()
	}
	starts := startJSStarts(cl, 6)
	defer starts.stop()

	var worst time.Duration
	for round := range 3 {
		starts.waitAcks(t, func(a jsAck) bool { return true }, 20*(round+1))
		old, victim := cl.leader(t)
		killed := time.Now()
		cl.nodes[victim].proc.kill(t)
		ack, ok := starts.firstFreshAfter(killed, victim, jsFailoverBound+20*time.Second)
		if !ok {
			t.Errorf("kill %d of %s: no start acknowledged through a surviving server within %s; the last errors: %s",
				round+1, cl.nodes[victim].name, jsFailoverBound+20*time.Second, starts.lastErrors())
			cl.dump(t)
			t.FailNow()
		}
		failover := ack.answered.Sub(killed)
		worst = max(worst, failover)
		t.Logf("failover: %s (kill %d, of %s in epoch %d; first start after it answered by %s)",
			failover.Round(time.Millisecond), round+1, cl.nodes[victim].name, old.Epoch, cl.nodes[ack.node].name)
		if failover > jsFailoverBound {
			t.Errorf("kill %d: the first start after it was acknowledged %s later, more than %s", round+1, failover, jsFailoverBound)
		}
		now, holder := cl.leader(t)
		if holder == victim || now.Epoch <= old.Epoch {
			t.Fatalf("after kill %d the lease is %+v (held by node %d), was %+v", round+1, now, holder, old)
		}
		restarted := time.Now()
		cl.restart(t, victim)
		cl.waitReplicasCurrent(t)
		// The restarted server serves starts again (forwarding them to the
		// writer unless it took the lease back).
		starts.waitAcks(t, func(a jsAck) bool { return a.node == victim && a.sent.After(restarted) }, 1)
	}
	t.Logf("failover: max %s over 3 kills", worst.Round(time.Millisecond))
	acked, failures, replayed := starts.stop()

	c, err := trellis.Open(context.Background(), trellis.Config{Server: cl.nodes[0].base()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for id, a := range acked {
		n := a.input
		run, err := c.Wait(ctx, id)
		if err != nil || run.Status != trellis.StatusSucceeded {
			t.Fatalf("acknowledged start %s (run %s), through %s: %+v, %v; %s", id, a.runID, cl.nodes[0].name, run, err, cl.describeRun(id))
		}
		if run.ID != a.runID {
			t.Errorf("start %s was acknowledged as run %s, but its run is %s", id, a.runID, run.ID)
		}
		if want := strconv.Itoa(n + 3); string(run.Output) != want {
			t.Errorf("run %s output %s, want %s", id, run.Output, want)
		}
		ops, err := c.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		checkStepsOnce(t, id, n, ops)
	}
	t.Logf("%d starts acknowledged across 3 SIGKILLs of the writer (%d by replaying an earlier attempt's answer), %d requests failed; all succeeded, each step recorded once",
		len(acked), replayed, failures)
}

// describeRun says how each server's replica sees run id (a failure's
// message: a replica that lags or stopped following shows here).
func (cl *jsCluster) describeRun(id string) string {
	var b strings.Builder
	for _, n := range cl.nodes {
		c, err := trellis.Open(context.Background(), trellis.Config{Server: n.base()})
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", n.name, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		run, err := c.Get(ctx, id)
		cancel()
		c.Close()
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", n.name, err)
		} else {
			fmt.Fprintf(&b, "%s: %s (run %s); ", n.name, run.Status, run.ID)
		}
	}
	return b.String()
}

// checkStepsOnce checks a kill-steps run's history: steps s0, s1, s2 at
// distinct positions, each once, done with its result.
func checkStepsOnce(t *testing.T, id string, n int, ops []*trellis.Op) {
	t.Helper()
	positions := map[int]bool{}
	var names []string
	for _, op := range ops {
		if positions[op.Position] {
			t.Errorf("run %s: position %d recorded twice", id, op.Position)
		}
		positions[op.Position] = true
		if op.Kind != trellis.OpStep {
			continue
		}
		names = append(names, op.Name)
		want := n
		for i := range op.Name[1] - '0' + 1 {
			want += int(i)
		}
		if !op.Done || op.Error != nil || string(op.Result) != strconv.Itoa(want) {
			t.Errorf("run %s: step %s at %d: done %v, error %v, result %s, want %d", id, op.Name, op.Position, op.Done, op.Error, op.Result, want)
		}
	}
	if !slices.Equal(names, []string{"s0", "s1", "s2"}) {
		t.Errorf("run %s: steps recorded %v, want s0, s1, s2 once each", id, names)
	}
}

// jsNode is one `trellis server` of the cluster.
type jsNode struct {
	name      string
	storeURL  string
	addr      string // HTTP
	natsAddr  string // the embedded NATS server's client port
	proc      *trellisProc
	listening <-chan string
}

func (n *jsNode) base() string { return "http://" + n.addr }

type jsCluster struct {
	nodes []*jsNode
	nc    *nats.Conn
	js    jetstream.JetStream
	kv    jetstream.KeyValue
}

// startJSCluster starts three servers at once (the log's stream waits for
// three) and connects to their NATS servers, to read the lease.
func startJSCluster(t *testing.T) *jsCluster {
	t.Helper()
	cl := &jsCluster{}
	// The cluster's secret, which its routes and NATS clients present.
	secret := strings.Repeat("cluster-secret-", 3)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	routes := make([]string, 3)
	for i := range 3 {
		routes[i] = testport.Addr(t)
	}
	for i := range 3 {
		var others []string
		for j, r := range routes {
			if j != i {
				others = append(others, "nats-route://"+r)
			}
		}
		n := &jsNode{name: fmt.Sprint("t", i+1), addr: testport.Addr(t), natsAddr: testport.Addr(t)}
		n.storeURL = fmt.Sprintf("jetstream://%s?cluster_listen=%s&routes=%s&replicas=3&server_name=%s&lease=1s&listen=%s&secret=%s",
			t.TempDir(), routes[i], strings.Join(others, ","), n.name, n.natsAddr, secretFile)
		cl.nodes = append(cl.nodes, n)
	}
	for _, n := range cl.nodes {
		cl.spawn(t, n)
	}
	for _, n := range cl.nodes {
		cl.awaitListening(t, n, 90*time.Second)
	}
	var urls []string
	for _, n := range cl.nodes {
		urls = append(urls, "nats://"+n.natsAddr)
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Token(secret), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cl.nc = nc
	if cl.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if cl.kv, err = cl.js.KeyValue(ctxT(t), "TRELLIS_default_LEADER"); err != nil {
		t.Fatal(err)
	}
	return cl
}

// dump makes each live server print its goroutines (SIGQUIT) and writes
// what each printed on stderr to a file of a directory it names (kept after
// the test), for a failure that only a server's state explains.
func (cl *jsCluster) dump(t *testing.T) {
	dir, err := os.MkdirTemp("", "trellis-jscluster-")
	if err != nil {
		t.Log(err)
		return
	}
	for _, n := range cl.nodes {
		if !n.proc.exited() {
			_ = n.proc.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-n.proc.done:
			case <-time.After(10 * time.Second):
			}
		}
		_ = os.WriteFile(filepath.Join(dir, n.name+".log"), []byte(n.proc.errOut.String()), 0o600)
	}
	t.Logf("the servers' stderr (goroutines of the live ones at the end) are in %s", dir)
}

func (cl *jsCluster) stop(t *testing.T) {
	if cl.nc != nil {
		cl.nc.Close()
	}
	for _, n := range cl.nodes {
		n.proc.kill(t)
	}
}

// spawn starts node n's server process without waiting for it to listen.
func (cl *jsCluster) spawn(t *testing.T, n *jsNode) {
	t.Helper()
	// The access log on: the store's Info lines (its takeovers) pass on to
	// the test's stderr, the requests' lines do not (procStderr).
	n.proc, n.listening = spawnNamed(t, n.name, listeningLine,
		"server", "--store", n.storeURL, "--listen", n.addr, "--insecure")
}

func (cl *jsCluster) awaitListening(t *testing.T, n *jsNode, within time.Duration) {
	t.Helper()
	n.proc.awaitServing(t, n.listening, "server "+n.name, within)
}

// restart starts node i again on its directory and URL.
func (cl *jsCluster) restart(t *testing.T, i int) {
	t.Helper()
	cl.spawn(t, cl.nodes[i])
	cl.awaitListening(t, cl.nodes[i], 60*time.Second)
}

// jsLease is the writer lease as storejs keeps it (key "leader" of bucket
// TRELLIS_default_LEADER).
type jsLease struct {
	Epoch uint64 `json:"epoch"`
	Owner string `json:"owner"`
}

// leader reads the writer lease and returns it with the index of the node
// whose process holds it; it waits for a lease held by a live node.
func (cl *jsCluster) leader(t *testing.T) (jsLease, int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var l jsLease
		e, err := cl.kv.Get(ctxT(t), "leader")
		if err == nil {
			err = json.Unmarshal(e.Value(), &l)
		}
		if err == nil {
			if i := cl.byOwner(l.Owner); i >= 0 {
				return l, i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no live server holds the writer lease: %+v, %v", l, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// byOwner finds the live node whose PID the lease owner HOST-PID-RAND names.
func (cl *jsCluster) byOwner(owner string) int {
	parts := strings.Split(owner, "-")
	if len(parts) < 3 {
		return -1
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		return -1
	}
	for i, n := range cl.nodes {
		if n.proc.cmd.Process.Pid == pid && !n.proc.exited() {
			return i
		}
	}
	return -1
}

// waitReplicasCurrent waits until the log's and the lease's streams have a
// leader and both other copies current: a restarted server caught up.
func (cl *jsCluster) waitReplicasCurrent(t *testing.T) {
	t.Helper()
	waitFor(t, "three current copies of the log and the lease", 60*time.Second, func() bool {
		for _, name := range []string{"TRELLIS_default", "KV_TRELLIS_default_LEADER"} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s, err := cl.js.Stream(ctx, name)
			var info *jetstream.StreamInfo
			if err == nil {
				info, err = s.Info(ctx)
			}
			cancel()
			if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
				return false
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					return false
				}
			}
		}
		return true
	})
}

// jsAck is a start a server acknowledged.
type jsAck struct {
	id             string
	node           int
	sent, answered time.Time
	replayed       bool // the answer to a retry whose first attempt took effect
}

// jsStarts is clients starting kill-steps runs through the cluster's servers,
// each start with its workflow ID as Idempotency-Key, retried on the next
// server until a server acknowledges it.
type jsStarts struct {
	cl      *jsCluster
	mu      sync.Mutex
	acked   map[string]jsStarted // by workflow ID
	acks    []jsAck
	failed  int
	lastErr map[int]string // by node: the last failed request's error and time
	changed chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	hc      *http.Client
}

func startJSStarts(cl *jsCluster, clients int) *jsStarts {
	ctx, cancel := context.WithCancel(context.Background())
	s := &jsStarts{cl: cl, acked: map[string]jsStarted{}, lastErr: map[int]string{}, changed: make(chan struct{}, 1), cancel: cancel,
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}}
	for g := range clients {
		s.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				s.startOne(ctx, fmt.Sprintf("js-%d-%d", g, i), g*100000+i, (g+i)%len(cl.nodes))
				select {
				case <-ctx.Done():
				case <-time.After(250 * time.Millisecond): // a pace the workers keep up with under -race
				}
			}
		})
	}
	return s
}

// startOne starts run id with input n, trying node after node until one
// acknowledges it or ctx ends.
func (s *jsStarts) startOne(ctx context.Context, id string, n, node int) {
	for ctx.Err() == nil {
		sent := time.Now()
		runID, replayed, err := s.post(ctx, s.cl.nodes[node].base(), id, n)
		s.mu.Lock()
		if err != nil {
			s.failed++
			s.lastErr[node] = fmt.Sprintf("%s at %s", err, time.Now().Format("15:04:05.000"))
		} else {
			s.acked[id] = jsStarted{input: n, runID: runID}
			s.acks = append(s.acks, jsAck{id: id, node: node, sent: sent, answered: time.Now(), replayed: replayed})
		}
		s.mu.Unlock()
		select {
		case s.changed <- struct{}{}:
		default:
		}
		if err == nil {
			return
		}
		node = (node + 1) % len(s.cl.nodes)
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// post sends POST /runs and returns the run ID of a 2xx answer and whether
// it replayed an earlier attempt's.
func (s *jsStarts) post(ctx context.Context, base, id string, n int) (string, bool, error) {
	body := fmt.Sprintf(`{"workflow":%q,"id":%q,"input":%d}`, killSteps.Name(), id, n)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/namespaces/default/runs", strings.NewReader(body))
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", id)
	res, err := s.hc.Do(req)
	if err != nil {
		return "", false, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", false, err
	}
	if res.StatusCode/100 != 2 {
		return "", false, fmt.Errorf("status %d: %s", res.StatusCode, b)
	}
	var run trellis.Run
	if err := json.Unmarshal(b, &run); err != nil || run.WorkflowID != id || run.ID == "" {
		return "", false, fmt.Errorf("a %d whose body is not the run %s: %s (%v)", res.StatusCode, id, b, err)
	}
	return run.ID, res.Header.Get("Idempotent-Replayed") != "", nil
}

// lastErrors says what the last failed request to each server met.
func (s *jsStarts) lastErrors() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for i, n := range s.cl.nodes {
		if e, ok := s.lastErr[i]; ok {
			fmt.Fprintf(&b, "%s: %s; ", n.name, e)
		}
	}
	return b.String()
}

// waitAcks waits until n acknowledgements match (within 60s).
func (s *jsStarts) waitAcks(t *testing.T, match func(jsAck) bool, n int) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.mu.Lock()
		got := 0
		for _, a := range s.acks {
			if match(a) {
				got++
			}
		}
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("%d matching starts acknowledged, waiting for %d", got, n)
		}
	}
}

// firstFreshAfter waits for the first start sent after t to a server other
// than killed and acknowledged without replaying an earlier attempt: one the
// writer in charge after t wrote.
func (s *jsStarts) firstFreshAfter(t time.Time, killed int, within time.Duration) (jsAck, bool) {
	deadline := time.After(within)
	for {
		s.mu.Lock()
		var first jsAck
		for _, a := range s.acks {
			if a.node != killed && !a.replayed && a.sent.After(t) && (first.id == "" || a.answered.Before(first.answered)) {
				first = a
			}
		}
		s.mu.Unlock()
		if first.id != "" {
			return first, true
		}
		select {
		case <-s.changed:
		case <-deadline:
			return jsAck{}, false
		}
	}
}

// stop stops the clients (idempotent) and returns the acknowledged starts,
// how many requests failed and how many answers were replays.
func (s *jsStarts) stop() (acked map[string]jsStarted, failed, replayed int) {
	s.cancel()
	s.wg.Wait()
	s.hc.CloseIdleConnections()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.acks {
		if a.replayed {
			replayed++
		}
	}
	return s.acked, s.failed, replayed
}

// jsStarted is an acknowledged start: its input and the run ID answered.
type jsStarted struct {
	input int
	runID string
}
