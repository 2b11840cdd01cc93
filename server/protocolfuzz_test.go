package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/protocol"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The worker that sends checkpoints is not trusted: a checkpoint that breaks
// the protocol's rules is refused invalid_argument, naming the op, and writes
// nothing; FuzzWorkerCheckpoint holds every input to that.
func TestWorkerCheckpointBreakingTheRules(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		item string // protojson of a CheckpointItem (its lease is set here)
		want string
	}{
		"unknown kind":        {`{"status":"running","ops":[{"position":2,"kind":"sleep","attempts":"1","startedAt":"2030-01-01T00:00:00Z"}]}`, `op 0 (position 2, sleep) kind: unknown op kind "sleep"`},
		"rewrite a done step": {`{"status":"running","ops":[{"position":0,"kind":"step","name":"a","done":true,"result":"Mg==","attempts":"1","startedAt":"2030-01-01T00:00:00Z","finishedAt":"2030-01-01T00:00:00Z"}]}`, `rewrites the op recorded there (step "a"), which is done`},
		"another op at a recorded position": {`{"status":"running","ops":[{"position":1,"kind":"event","name":"stop","done":true,"attempts":"1","startedAt":"2030-01-01T00:00:00Z","finishedAt":"2030-01-01T00:00:00Z"}]}`,
			`the op recorded there is event "go"`},
		"skip ahead":           {`{"status":"running","ops":[{"position":99999,"kind":"now","done":true,"result":"IjIwMzAtMDEtMDFUMDA6MDA6MDBaIg==","attempts":"1","startedAt":"2030-01-01T00:00:00Z"}]}`, "skips ahead"},
		"result on a delete":   {`{"status":"running","ops":[{"position":2,"kind":"delete","name":"k","done":true,"result":"MQ==","attempts":"1","startedAt":"2030-01-01T00:00:00Z"}],"kv":[{"key":"k","delete":true}]}`, "has no result"},
		"reserved stream name": {`{"status":"running","stream":[{"name":"run.succeeded","data":"eyJyZXN1bHQiOjF9"}]}`, "run.succeeded goes with status succeeded"},
		"emitted reserved name": {`{"status":"running","ops":[{"position":2,"kind":"emit","name":"step.completed","done":true,"attempts":"1","startedAt":"2030-01-01T00:00:00Z"}],"stream":[{"name":"step.completed","data":"e30="}]}`,
			"reserved for the run's lifecycle"},
		"cancelled unasked": {`{"status":"cancelled","error":{"message":"run cancelled","type":"cancelled"}}`, "the run's cancellation was not requested"},
		"unknown status":    {`{"status":"archived"}`, `"archived" is not a status a worker writes`},
		"a child of my choosing": {`{"status":"running","ops":[{"position":2,"kind":"child","name":"remote","attempts":"1","result":"eyJydW5faWQiOiJ4In0=","startedAt":"2030-01-01T00:00:00Z"}],"children":[{"position":"2","runs":[{"id":"victim","workflowId":"victim","workflow":"remote","queue":"default"}]}]}`,
			`run 0 has ID "victim"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, cr := newRecordedRun(t)
			before := snapshotRun(t, e, cr.Run.Id)
			var it pb.CheckpointItem
			if err := protojson.Unmarshal([]byte(c.item), &it); err != nil {
				t.Fatal(err)
			}
			it.Lease, it.Seq = leaseOf(cr), 2
			err := e.checkpointAs("worker", &it)
			if !errors.Is(err, store.ErrInvalidParams) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want invalid params naming %q", err, c.want)
			}
			if after := snapshotRun(t, e, cr.Run.Id); after != before {
				t.Fatalf("a refused checkpoint wrote:\n%s\nthen\n%s", before, after)
			}
			// The lease goes on: the worker's next valid checkpoint is applied.
			ok := &pb.CheckpointItem{Lease: leaseOf(cr), Seq: 2, Status: "succeeded", Output: []byte(`1`)}
			if err := e.checkpointAs("worker", ok); err != nil {
				t.Fatalf("a valid checkpoint after the refused one: %v", err)
			}
		})
	}
}

// A worker frozen past its lease (SIGSTOP, a paused VM) wakes up and sends
// the write it was making, while a later claim of the run, pushed through the
// same server, has written the op at that position since: the write is
// refused as lost, what the worker can act on (it abandons the run), not as
// breaking the protocol, which it did not. Found from outside: a Python worker
// stopped past its lease was told "rewrites the op recorded there".
func TestStaleLeaseWriteIsLostNotInvalid(t *testing.T) {
	t.Parallel()
	e, first := newRecordedRun(t)
	ctx := t.Context()
	// The first lease ends (as at its expiry) and a second claim takes the run.
	if err := e.st.LeaseRelease(ctx, &store.LeaseReleaseParams{Lease: store.Lease{Namespace: "default",
		RunID: first.Run.Id, Token: first.LeaseToken}}); err != nil {
		t.Fatal(err)
	}
	second := e.claimAs("worker", "default")
	if second.Run.Id != first.Run.Id || second.LeaseToken <= first.LeaseToken {
		t.Fatalf("the second claim took run %s with token %d (first: %s, %d)", second.Run.Id, second.LeaseToken,
			first.Run.Id, first.LeaseToken)
	}
	now := timestamppb.Now()
	step := func(name string) []*pb.Op {
		return []*pb.Op{{Position: 1, Kind: "event", Name: "go", Done: true, Result: []byte(`{}`), Attempts: 1, StartedAt: now, FinishedAt: now},
			{Position: 2, Kind: "step", Name: name, Done: true, Result: []byte(`2`), Attempts: 1, StartedAt: now, FinishedAt: now}}
	}
	if err := e.checkpointAs("worker", &pb.CheckpointItem{Lease: leaseOf(second), Seq: 1, Status: "running", Ops: step("b")}); err != nil {
		t.Fatal(err)
	}
	before := snapshotRun(t, e, first.Run.Id)
	// The first lease's next write, then one whose seq skips (a retry after
	// timeouts): each read against the second lease's history would break
	// the rules (another step at position 2).
	for _, seq := range []int64{2, 5} {
		err := e.checkpointAs("worker", &pb.CheckpointItem{Lease: leaseOf(first), Seq: seq, Status: "running", Ops: step("c")})
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("seq %d: the stale lease's write: %v, want lease lost", seq, err)
		}
	}
	if after := snapshotRun(t, e, first.Run.Id); after != before {
		t.Fatalf("the stale lease's write changed the run:\n%s\nthen\n%s", before, after)
	}
	// The second lease goes on.
	if err := e.checkpointAs("worker", &pb.CheckpointItem{Lease: leaseOf(second), Seq: 2, Status: "succeeded", Output: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
}

var fuzzRuns atomic.Int64

// newRecordedRun makes a run claimed by "worker" whose history holds a done
// step "a" (position 0) and an event wait "go" in progress (position 1),
// written by the lease's first checkpoint.
func newRecordedRun(t *testing.T) (*env, *pb.ClaimedRun) {
	e := newBoundaryEnv(t)
	e.remoteRun(fmt.Sprintf("f%d", fuzzRuns.Add(1)), "default")
	cr := e.claimAs("worker", "default")
	now := timestamppb.Now()
	first := &pb.CheckpointItem{Lease: leaseOf(cr), Seq: 1, Status: "running",
		Ops: []*pb.Op{
			{Position: 0, Kind: "step", Name: "a", Done: true, Result: []byte(`1`), Attempts: 1, StartedAt: now, FinishedAt: now},
			{Position: 1, Kind: "event", Name: "go", Result: []byte(`{}`), Attempts: 1, StartedAt: now},
		},
		Stream: []*pb.StreamWrite{{Name: "run.started", Data: []byte(`{"attempt":1,"workflow":"remote"}`)},
			{Name: "step.completed", Data: []byte(`{"name":"a","attempt":1,"duration_ms":1}`)}}}
	if err := e.checkpointAs("worker", first); err != nil {
		t.Fatal(err)
	}
	return e, cr
}

// snapshotRun is what a checkpoint could change of run id, and of the
// namespace (the runs it could start, the approvals it could request).
func snapshotRun(t *testing.T, e *env, id string) string {
	ctx := t.Context()
	run, err := e.st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: id})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := e.st.HistoryList(ctx, &store.HistoryListParams{Namespace: "default", Ref: id})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := e.st.StreamRead(ctx, &store.StreamReadParams{Namespace: "default", RunID: id, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := e.st.RunList(ctx, &store.RunListParams{Namespace: "default", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := e.st.ApprovalList(ctx, &store.ApprovalListParams{Namespace: "default", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs.Runs {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	b, _ := json.Marshal(map[string]any{"status": run.Status, "output": run.Output, "error": run.Error, "wait": run.WaitReason,
		"updated": run.UpdatedAt, "lease": run.LeaseOwner, "ops": ops, "stream": stream.Events, "runs": ids, "approvals": approvals.Approvals})
	return string(b)
}

// FuzzWorkerCheckpoint sends fuzzed checkpoints (protojson of a
// CheckpointItem, its lease set to a run's real one) to a server: one refused
// changes nothing of the run or its namespace; one applied leaves a history
// valid by the protocol.
func FuzzWorkerCheckpoint(f *testing.F) {
	for _, s := range []string{
		`{"status":"running","ops":[{"position":2,"kind":"step","name":"b","done":true,"result":"Mg==","attempts":"1","startedAt":"2030-01-01T00:00:00Z","finishedAt":"2030-01-01T00:00:00Z"}],"stream":[{"name":"step.completed","data":"eyJuYW1lIjoiYiJ9"}]}`,
		`{"status":"running","ops":[{"position":0,"kind":"step","name":"a","done":true,"result":"Mg==","attempts":"1","startedAt":"2030-01-01T00:00:00Z"}]}`,
		`{"status":"waiting","wakeAt":"2030-01-01T00:00:00Z","ops":[{"position":2,"kind":"timer","result":"IjIwMzAtMDEtMDFUMDA6MDA6MDBaIg==","attempts":"1","startedAt":"2030-01-01T00:00:00Z"}],"stream":[{"name":"run.waiting","data":"eyJyZWFzb24iOiJzbGVlcCJ9"}]}`,
		`{"status":"running","ops":[{"position":2,"kind":"set","name":"k","done":true,"result":"MQ==","attempts":"1","startedAt":"2030-01-01T00:00:00Z"}],"kv":[{"key":"k","value":"MQ=="}]}`,
		`{"status":"running","ops":[{"position":2,"kind":"emit","name":"p","done":true,"attempts":"1","startedAt":"2030-01-01T00:00:00Z"}],"stream":[{"name":"p","data":"MQ=="}]}`,
		`{"status":"succeeded","output":"MQ==","stream":[{"name":"run.succeeded","data":"eyJyZXN1bHQiOjF9"}]}`,
		`{"status":"failed","error":{"message":"x"},"stream":[{"name":"run.cancelled","data":"e30="}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var it pb.CheckpointItem
		if protojson.Unmarshal(data, &it) != nil {
			return
		}
		e, cr := newRecordedRun(t)
		before := snapshotRun(t, e, cr.Run.Id)
		it.Lease, it.Seq = leaseOf(cr), 2
		if err := e.checkpointAs("worker", &it); err != nil {
			if after := snapshotRun(t, e, cr.Run.Id); after != before {
				t.Fatalf("checkpoint %s was refused (%v) but wrote:\n%s\nthen\n%s", data, err, before, after)
			}
			return
		}
		ops, err := e.st.HistoryList(t.Context(), &store.HistoryListParams{Namespace: "default", Ref: cr.Run.Id})
		if err != nil {
			t.Fatal(err)
		}
		if err := protocol.CheckHistory(ops); err != nil {
			t.Fatalf("checkpoint %s was applied and left an invalid history: %v", data, err)
		}
	})
}

// A worker that comes back after its run was taken over: its late checkpoint,
// through the server that pushed the new lease, is refused as a lost lease
// (the server's record of the run's history belongs to the new lease), and
// the new worker's checkpoints go on.
func TestCheckpointOfATakenOverLease(t *testing.T) {
	t.Parallel()
	e := newBoundaryEnv(t)
	e.remoteRun("taken", "default")
	claim := func(lease time.Duration) *pb.ClaimedRun {
		s, err := e.workerClient("worker").Claim(t.Context(), connect.NewRequest(&pb.ClaimRequest{Namespace: "default",
			Queues: []string{"default"}, Workflows: []string{"remote"}, Worker: "worker", Credit: 1, LeaseDuration: durationpb.New(lease)}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var runs []*pb.ClaimedRun
		for s.Receive() {
			runs = append(runs, s.Msg().Runs...)
		}
		if len(runs) != 1 {
			t.Fatalf("claimed %d runs (%v)", len(runs), s.Err())
		}
		return runs[0]
	}
	old := claim(50 * time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the lease expires
	// The new lease outlives the test: a 50 ms one could expire before its
	// checkpoint on a loaded machine, and any claim in the namespace (the
	// env's worker polls) would take the run back.
	cur := claim(time.Minute)
	step := func(cr *pb.ClaimedRun, name string, pos int64) *pb.CheckpointItem {
		now := timestamppb.Now()
		return &pb.CheckpointItem{Lease: leaseOf(cr), Seq: 1, Status: "running", Ops: []*pb.Op{{Position: pos, Kind: "step", Name: name,
			Done: true, Result: []byte(`1`), Attempts: 1, StartedAt: now, FinishedAt: now}}}
	}
	if err := e.checkpointAs("worker", step(old, "late", 0)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the old lease's checkpoint: %v, want lease lost", err)
	}
	if err := e.checkpointAs("worker", step(cur, "a", 0)); err != nil {
		t.Fatalf("the new lease's checkpoint: %v", err)
	}
}

// A checkpoint retried after its answer was lost (the same seq, the same
// request) is answered as applied, not refused for writing its own ops again:
// through the same server after the write ended the lease, and through
// another server of the store, which learns the run's history from the store.
func TestRetriedCheckpointIsReplayed(t *testing.T) {
	t.Parallel()
	url := storeURLs(t)["sqlite"](t)
	auth := func(c *Config) { c.Authenticator = boundaryTokens() }
	a := newEnv(t, url, auth)
	b := newEnv(t, url, auth)
	for i, through := range []*env{a, b} {
		id := fmt.Sprintf("retried-%d", i)
		a.remoteRun(id, "default")
		cr := a.claimAs("worker", "default")
		now := timestamppb.Now()
		step := func(pos int64, name string) *pb.Op {
			return &pb.Op{Position: pos, Kind: "step", Name: name, Done: true, Result: []byte(`1`), Attempts: 1, StartedAt: now, FinishedAt: now}
		}
		first := &pb.CheckpointItem{Lease: leaseOf(cr), Seq: 1, Status: "running", Ops: []*pb.Op{step(0, "a")}}
		final := &pb.CheckpointItem{Lease: leaseOf(cr), Seq: 2, Status: "succeeded", Output: []byte(`1`), Ops: []*pb.Op{step(1, "b")},
			Stream: []*pb.StreamWrite{{Name: "run.succeeded", Data: []byte(`{"result":1}`)}}}
		// The first send through a (i = 0, which pushed the claim) or b (i = 1:
		// it knows nothing of the run), the retries through b.
		for k, it := range []*pb.CheckpointItem{first, first, final, final} {
			res, err := through.workerClient("worker").Checkpoint(t.Context(), connect.NewRequest(&pb.CheckpointRequest{Checkpoints: []*pb.CheckpointItem{it}}))
			if err != nil || res.Msg.Results[0].Error != nil {
				t.Fatalf("run %d, send %d (seq %d): %v %v", i, k, it.Seq, err, res.Msg.Results[0].Error)
			}
			if retry := k%2 == 1; res.Msg.Results[0].Replayed != retry {
				t.Fatalf("run %d, send %d (seq %d): replayed %v, want %v", i, k, it.Seq, res.Msg.Results[0].Replayed, retry)
			}
			through = b
		}
		if run, err := a.st.RunGet(t.Context(), &store.RunGetParams{Namespace: "default", Ref: id}); err != nil || run.Status != store.StatusSucceeded {
			t.Fatalf("run %s: %v %v", id, run, err)
		}
	}
}
