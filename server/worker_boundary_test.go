package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis/internal/auth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	ww "github.com/trellis-dev/trellis/internal/workerwire"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The worker boundary (docs/security.md, "Threat model"): what a worker token
// may write is fenced by lease secrets and by its grant on each run's queue.

// boundaryTokens are testTokens and workers of narrower grants: "q1-worker"
// and "q2-worker" (worker on one queue of default), "worker2" (a second worker
// of the whole namespace), "q1-worker-q2-producer", "other-worker" (worker of
// namespace other).
func boundaryTokens() tokens {
	m := testTokens()
	g := func(role auth.Role, ns, q string) auth.Grant { return auth.Grant{Role: role, Namespace: ns, Queue: q} }
	m["q1-worker"] = &auth.Principal{Name: "q1w", Grants: []auth.Grant{g(auth.RoleWorker, "default", "q1")}}
	m["q2-worker"] = &auth.Principal{Name: "q2w", Grants: []auth.Grant{g(auth.RoleWorker, "default", "q2")}}
	m["worker2"] = &auth.Principal{Name: "worker2", Grants: []auth.Grant{g(auth.RoleWorker, "default", "")}}
	m["q1-worker-q2-producer"] = &auth.Principal{Name: "q1wq2p",
		Grants: []auth.Grant{g(auth.RoleWorker, "default", "q1"), g(auth.RoleProducer, "default", "q2")}}
	m["other-worker"] = &auth.Principal{Name: "otherw", Grants: []auth.Grant{g(auth.RoleWorker, "other", "")}}
	return m
}

func newBoundaryEnv(t *testing.T) *env {
	return newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.Authenticator = boundaryTokens() })
}

// remoteRun creates a run of workflow "remote" (no worker in the test process
// serves it) in queue q and returns its ID.
func (e *env) remoteRun(id, q string) string {
	e.t.Helper()
	if _, err := e.st.RunCreate(e.t.Context(), &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id,
		Workflow: "remote", Queue: q}); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// claimAs claims one run of queue q with token's worker client.
func (e *env) claimAs(token, q string) *pb.ClaimedRun {
	e.t.Helper()
	s, err := e.workerClient(token).Claim(e.t.Context(), connect.NewRequest(&pb.ClaimRequest{Namespace: "default",
		Queues: []string{q}, Workflows: []string{"remote"}, Worker: token, Credit: 1, LeaseDuration: durationpb.New(time.Minute)}))
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	var runs []*pb.ClaimedRun
	for s.Receive() {
		runs = append(runs, s.Msg().Runs...)
	}
	if err := s.Err(); err != nil || len(runs) != 1 {
		e.t.Fatalf("claim of %s as %s: %d runs, %v", q, token, len(runs), err)
	}
	return runs[0]
}

func leaseOf(cr *pb.ClaimedRun) *pb.Lease {
	return &pb.Lease{Namespace: cr.Run.Namespace, RunId: cr.Run.Id, Token: cr.LeaseToken, Queue: cr.Run.Queue, Secret: cr.LeaseSecret}
}

// checkpointAs sends one checkpoint under lease and returns the call's error
// or, when the call succeeded, the item's.
func (e *env) checkpointAs(token string, it *pb.CheckpointItem) error {
	e.t.Helper()
	res, err := e.workerClient(token).Checkpoint(e.t.Context(), connect.NewRequest(&pb.CheckpointRequest{Checkpoints: []*pb.CheckpointItem{it}}))
	if err != nil {
		return err
	}
	if d := res.Msg.Results[0].Error; d != nil {
		return ww.FromDetail(d)
	}
	return nil
}

// wantUntouched checks that run id is still running under the lease of owner,
// with no history, output or children.
func (e *env) wantUntouched(id, owner string) {
	e.t.Helper()
	run, err := e.st.RunGet(e.t.Context(), &store.RunGetParams{Namespace: "default", Ref: id})
	if err != nil {
		e.t.Fatal(err)
	}
	ops, err := e.st.HistoryList(e.t.Context(), &store.HistoryListParams{Namespace: "default", Ref: id})
	if err != nil {
		e.t.Fatal(err)
	}
	if run.Status != store.StatusRunning || run.LeaseOwner != owner || len(run.Output) > 0 || len(ops) > 0 {
		e.t.Fatalf("run %s = %s, owner %q, output %q, %d ops; want running under %s, untouched", id, run.Status,
			run.LeaseOwner, run.Output, len(ops), owner)
	}
}

// A lease's writes need its secret: a worker of the same namespace that knows
// a run's ID and lease token (both readable, or guessable from the run's
// times) cannot checkpoint, extend or release it; nor can a secret be moved to
// another run or token. Each attempt is answered as a lost lease and changes
// nothing, and the real worker goes on.
func TestLeaseSecretFencesWrites(t *testing.T) {
	t.Parallel()
	e := newBoundaryEnv(t)
	ctx := t.Context()
	e.remoteRun("victim", "q2")
	e.remoteRun("other", "q2")
	victim := e.claimAs("q2-worker", "q2")
	other := e.claimAs("q2-worker", "q2")
	if len(victim.LeaseSecret) < 22 || victim.LeaseSecret == other.LeaseSecret {
		t.Fatalf("lease secrets %q and %q: want distinct secrets of at least 128 bits", victim.LeaseSecret, other.LeaseSecret)
	}
	forged := map[string]*pb.Lease{}
	for name, mod := range map[string]func(l *pb.Lease){
		"no secret":            func(l *pb.Lease) { l.Secret = "" },
		"a guessed secret":     func(l *pb.Lease) { l.Secret = strings.Repeat("A", len(l.Secret)) },
		"another run's secret": func(l *pb.Lease) { l.Secret = other.LeaseSecret },
		"another token":        func(l *pb.Lease) { l.Token++ },
		"a malformed secret":   func(l *pb.Lease) { l.Secret = "%%%" },
	} {
		l := leaseOf(victim)
		mod(l)
		forged[name] = l
	}
	for name, l := range forged {
		for _, token := range []string{"worker2", "q2-worker"} {
			err := e.checkpointAs(token, &pb.CheckpointItem{Lease: l, Status: "succeeded", Output: []byte(`"pwned"`),
				Ops: []*pb.Op{{Position: 0, Kind: "step", Name: "s", Done: true, Attempts: 1, Result: []byte(`1`)}}})
			if !errors.Is(err, store.ErrLeaseLost) {
				t.Errorf("checkpoint with %s as %s = %v, want lease lost", name, token, err)
			}
			res, err := e.workerClient(token).ExtendLeases(ctx, connect.NewRequest(&pb.ExtendLeasesRequest{Leases: []*pb.Lease{l},
				Duration: durationpb.New(time.Hour)}))
			if err != nil || len(res.Msg.Lost) != 1 || res.Msg.Lost[0] != "victim" {
				t.Errorf("extend with %s as %s = %v, %v; want the lease lost", name, token, res, err)
			}
			_, err = e.workerClient(token).ReleaseLease(ctx, connect.NewRequest(&pb.ReleaseLeaseRequest{Lease: l}))
			if connect.CodeOf(err) != connect.CodeAborted {
				t.Errorf("release with %s as %s = %v, want aborted (lease lost)", name, token, err)
			}
		}
	}
	e.wantUntouched("victim", "q2-worker")
	run, _ := e.st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "victim"})
	if got := run.LeaseExpiresAt; got == nil || got.After(time.Now().Add(2*time.Minute)) {
		t.Errorf("lease expiry %v: a forged extension moved it", got)
	}
	// The worker it was issued to writes with it.
	if err := e.checkpointAs("q2-worker", &pb.CheckpointItem{Lease: leaseOf(victim), Status: "succeeded", Output: []byte(`"ok"`)}); err != nil {
		t.Fatalf("the real worker's checkpoint: %v", err)
	}
	if run, _ := e.st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "victim"}); run.Status != store.StatusSucceeded || string(run.Output) != `"ok"` {
		t.Fatalf("run after the real worker's checkpoint: %s %s", run.Status, run.Output)
	}
}

// Every worker call is authorized on the queue of the run it touches: a worker
// limited to q1 may not write q2's leases (even naming q1 in them), read q2's
// runs, subscribe to them, resume them, nor advertise q2 in its record.
func TestWorkerCallsAuthorizedOnQueue(t *testing.T) {
	t.Parallel()
	e := newBoundaryEnv(t)
	ctx := t.Context()
	e.remoteRun("r2", "q2")
	cr := e.claimAs("q2-worker", "q2")
	c := e.workerClient("q1-worker")
	denied := func(what string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s as q1-worker = %v, want permission_denied", what, err)
		}
	}
	stolen := leaseOf(cr) // even with the real secret, q2 is not its queue
	denied("checkpoint of q2's lease", e.checkpointAs("q1-worker", &pb.CheckpointItem{Lease: stolen, Status: "succeeded"}))
	_, err := c.ExtendLeases(ctx, connect.NewRequest(&pb.ExtendLeasesRequest{Leases: []*pb.Lease{stolen}, Duration: durationpb.New(time.Hour)}))
	denied("extend of q2's lease", err)
	_, err = c.ReleaseLease(ctx, connect.NewRequest(&pb.ReleaseLeaseRequest{Lease: stolen}))
	denied("release of q2's lease", err)
	relabeled := leaseOf(cr)
	relabeled.Queue = "q1" // its grant, but the secret binds q2
	if err := e.checkpointAs("q1-worker", &pb.CheckpointItem{Lease: relabeled, Status: "succeeded"}); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("checkpoint of q2's run relabeled q1 = %v, want lease lost", err)
	}
	_, err = c.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{Namespace: "default", Ref: "r2"}))
	denied("history of q2's run", err)
	_, err = c.ListChildren(ctx, connect.NewRequest(&pb.ListChildrenRequest{Namespace: "default", Parent: "r2"}))
	denied("children of q2's run", err)
	for _, topic := range []string{store.RunTopicPrefix("default") + "r2", store.StreamTopic("default", "r2")} {
		denied("subscription to "+topic, subscribe(ctx, c, topic))
	}
	if err := subscribe(ctx, c, store.TopicReady); err != nil {
		t.Errorf("subscription to the wake-ups: %v", err)
	}
	for _, qs := range [][]string{nil, {"q2"}, {"q1", "q2"}} {
		_, err := c.ResumeBlocked(ctx, connect.NewRequest(&pb.ResumeBlockedRequest{Namespace: "default", Workflows: []string{"remote"}, Queues: qs}))
		denied("resume of blocked runs of "+strings.Join(qs, ","), err)
		_, err = c.Heartbeat(ctx, connect.NewRequest(&pb.HeartbeatRequest{Namespace: "default", Name: "w1", Workflows: []string{"remote"},
			Queues: qs, Ttl: durationpb.New(time.Minute)}))
		denied("a record advertising "+strings.Join(qs, ","), err)
	}
	if _, err := c.ResumeBlocked(ctx, connect.NewRequest(&pb.ResumeBlockedRequest{Namespace: "default", Workflows: []string{"remote"},
		Queues: []string{"q1"}})); err != nil {
		t.Errorf("resume of q1's blocked runs: %v", err)
	}
	other := e.workerClient("other-worker")
	_, err = other.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{Namespace: "default", Ref: "r2"}))
	denied("history as a worker of another namespace", err)
	e.wantUntouched("r2", "q2-worker")
}

func subscribe(ctx context.Context, c workerv1connect.WorkerServiceClient, topic string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.Subscribe(ctx, connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: topic}))
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Receive() && s.Msg().Subscribed {
		return nil
	}
	if err := s.Err(); err != nil {
		return err
	}
	return errors.New("subscription not acknowledged")
}

// A child run a checkpoint starts is a start in its queue: a worker of q1 may
// start children in q1, not in q2 (a producer of q1 could not either), unless
// it also may start runs there; the refused checkpoint writes nothing.
func TestCheckpointChildStartsAuthorized(t *testing.T) {
	t.Parallel()
	e := newBoundaryEnv(t)
	// A child's run ID is derived from its parent's (the protocol's rule:
	// internal/protocol): the childID argument names the child's workflow ID.
	withChild := func(cr *pb.ClaimedRun, childID, q string) *pb.CheckpointItem {
		return &pb.CheckpointItem{Lease: leaseOf(cr), Status: "waiting", WaitReason: "child", WaitEvents: []string{store.GroupEvent(0)},
			Ops: []*pb.Op{{Position: 0, Kind: "child", Name: "anything", Attempts: 1, Result: []byte(`{"run_id":"` + cr.Run.Id + `.0"}`),
				StartedAt: timestamppb.Now()}},
			Children: []*pb.ChildGroup{{Position: 0, Runs: []*pb.ChildRun{{Id: cr.Run.Id + ".0", WorkflowId: childID, Workflow: "anything", Queue: q}}}}}
	}
	e.remoteRun("p1", "q1")
	cr := e.claimAs("q1-worker", "q1")
	e.remoteRun("p3", "q1")
	if err := e.checkpointAs("q1-worker", withChild(cr, "c2", "q2")); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("child in q2 = %v, want permission_denied", err)
	}
	e.wantUntouched("p1", "q1-worker")
	if _, err := e.st.RunGet(t.Context(), &store.RunGetParams{Namespace: "default", Ref: "p1.0"}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("the refused child: %v, want not found", err)
	}
	if err := e.checkpointAs("worker", withChild(e.claimAs("worker", "q1"), "c3", "a/b")); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("child in queue a/b = %v, want invalid_argument (names follow the API's rule)", err)
	}
	if err := e.checkpointAs("q1-worker", withChild(cr, "c1", "q1")); err != nil {
		t.Fatalf("child in q1: %v", err)
	}
	e.remoteRun("p2", "q1")
	cr = e.claimAs("q1-worker-q2-producer", "q1")
	if err := e.checkpointAs("q1-worker-q2-producer", withChild(cr, "c2b", "q2")); err != nil {
		t.Fatalf("child in q2 by a producer of q2: %v", err)
	}
	for _, id := range []string{"c1", "c2b"} {
		if _, err := e.st.RunGet(t.Context(), &store.RunGetParams{Namespace: "default", Ref: id}); err != nil {
			t.Errorf("child %s: %v", id, err)
		}
	}
}

// A worker record belongs to the principal that made it: another principal's
// worker can neither refresh (replace) nor remove it.
func TestWorkerRecordOwned(t *testing.T) {
	t.Parallel()
	e := newBoundaryEnv(t)
	ctx := t.Context()
	beat := func(token string, wfs ...string) error {
		_, err := e.workerClient(token).Heartbeat(ctx, connect.NewRequest(&pb.HeartbeatRequest{Namespace: "default", Name: "w-a",
			Workflows: wfs, Ttl: durationpb.New(time.Minute), Start: true}))
		return err
	}
	if err := beat("worker", "real"); err != nil {
		t.Fatal(err)
	}
	owned := func(what string, err error) {
		t.Helper()
		var we *ww.Error
		if connect.CodeOf(err) != connect.CodePermissionDenied || !errors.As(ww.FromConnect(err), &we) || we.Reason != ww.ReasonWorkerOwned {
			t.Errorf("%s = %v, want permission_denied %s", what, err, ww.ReasonWorkerOwned)
		}
	}
	owned("another principal's heartbeat", beat("worker2", "fake"))
	_, err := e.workerClient("worker2").RemoveWorker(ctx, connect.NewRequest(&pb.RemoveWorkerRequest{Namespace: "default", Name: "w-a"}))
	owned("another principal's remove", err)
	ws, err := e.st.WorkerList(ctx, &store.WorkerListParams{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Name == "w-a" && (w.Owner != "worker" || len(w.Workflows) != 1 || w.Workflows[0] != "real") {
			t.Fatalf("record = %+v, want the owner's, unchanged", w)
		}
	}
	if _, err := e.workerClient("worker").RemoveWorker(ctx, connect.NewRequest(&pb.RemoveWorkerRequest{Namespace: "default", Name: "w-a"})); err != nil {
		t.Fatalf("the owner's remove: %v", err)
	}
}

// No answer shows a live lease's secret: not the run, a list, its history or
// its stream.
func TestLeaseSecretNeverShown(t *testing.T) {
	t.Parallel()
	e := newBoundaryEnv(t)
	e.remoteRun("s1", "default")
	cr := e.claimAs("worker", "default")
	if err := e.checkpointAs("worker", &pb.CheckpointItem{Lease: leaseOf(cr), Status: "running",
		Ops: []*pb.Op{{Position: 0, Kind: "step", Name: "s", Done: true, Attempts: 1, Result: []byte(`1`), StartedAt: timestamppb.Now()}}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/namespaces/default/runs/s1", "/v1/namespaces/default/runs", "/v1/namespaces/default/runs/s1/history",
		"/v1/namespaces/default/runs/s1/result", "/v1/namespaces/default/workers"} {
		r := e.do("GET", path, "admin", nil)
		if r.status/100 != 2 || strings.Contains(string(r.body), cr.LeaseSecret) {
			t.Errorf("GET %s: %d, shows the secret: %v", path, r.status, strings.Contains(string(r.body), cr.LeaseSecret))
		}
	}
	ui := e.uiSession("admin")
	if r := ui.get("/ui/default/runs/s1"); r.status != 200 || strings.Contains(string(r.body), cr.LeaseSecret) {
		t.Errorf("UI run page: %d, shows the secret: %v", r.status, strings.Contains(string(r.body), cr.LeaseSecret))
	}
	if err := e.checkpointAs("worker", &pb.CheckpointItem{Lease: leaseOf(cr), Status: "succeeded", Output: []byte(`1`),
		Ops:    []*pb.Op{{Position: 1, Kind: "emit", Name: "note", Done: true, Attempts: 1, StartedAt: timestamppb.Now()}},
		Stream: []*pb.StreamWrite{{Name: "note", Data: []byte(`"hello"`)}}}); err != nil {
		t.Fatal(err)
	}
	ev, ok := e.openStream("s1", "?after=0", "admin").next(t)
	if !ok || ev.name != "note" || strings.Contains(ev.id+ev.name+ev.data, cr.LeaseSecret) {
		t.Errorf("stream event %+v (%v): want the note, without the secret", ev, ok)
	}
}

// What a worker writes is JSON every strict client reads as the worker meant:
// a payload with invalid UTF-8 or a name twice is refused (INVALID_PARAMS,
// naming it) and nothing of the checkpoint is written.
func TestCheckpointPayloadsValid(t *testing.T) {
	t.Parallel()
	e := newBoundaryEnv(t)
	e.remoteRun("p", "default")
	cr := e.claimAs("worker", "default")
	bad := map[string]func(it *pb.CheckpointItem, b []byte){
		"output":       func(it *pb.CheckpointItem, b []byte) { it.Status, it.Output = "succeeded", b },
		"op result":    func(it *pb.CheckpointItem, b []byte) { it.Ops[0].Result = b },
		"value":        func(it *pb.CheckpointItem, b []byte) { it.Kv = []*pb.KVWrite{{Key: "k", Value: b}} },
		"stream event": func(it *pb.CheckpointItem, b []byte) { it.Stream = []*pb.StreamWrite{{Name: "x", Data: b}} },
		"child input": func(it *pb.CheckpointItem, b []byte) {
			it.Ops = append(it.Ops, &pb.Op{Position: 1, Kind: "child", Name: "c"})
			it.Children = []*pb.ChildGroup{{Position: 1, Runs: []*pb.ChildRun{{Id: "c", WorkflowId: "c", Workflow: "w", Queue: "default", Input: b}}}}
		},
		"approval details": func(it *pb.CheckpointItem, b []byte) {
			it.Ops = append(it.Ops, &pb.Op{Position: 1, Kind: "approval", Name: "ok"})
			it.Approvals = []*pb.ApprovalRequest{{Id: "a", Position: 1, Name: "ok", Details: b}}
		},
	}
	for what, put := range bad {
		for _, payload := range []string{"\"\xff\"", `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `not json`, `"\ud800"`} {
			it := &pb.CheckpointItem{Lease: leaseOf(cr), Status: "running",
				Ops: []*pb.Op{{Position: 0, Kind: "step", Name: "s", Done: true, Attempts: 1, Result: []byte(`1`)}}}
			put(it, []byte(payload))
			err := e.checkpointAs("worker", it)
			if !errors.Is(err, store.ErrInvalidParams) || !strings.Contains(err.Error(), strings.Split(what, " ")[0]) {
				t.Errorf("%s %q: %v, want INVALID_PARAMS naming it", what, payload, err)
			}
		}
	}
	e.wantUntouched("p", "worker")
}
