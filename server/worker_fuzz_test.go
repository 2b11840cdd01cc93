package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	ww "github.com/trellis-dev/trellis/internal/workerwire"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fuzzProcedures are the worker procedures the fuzz target sends messages to,
// with whether each is a server stream.
var fuzzProcedures = []struct {
	name   string
	stream bool
}{
	{"Claim", true}, {"ExtendLeases", false}, {"ReleaseLease", false}, {"Checkpoint", false},
	{"ResumeBlocked", false}, {"ListHistory", false}, {"ListChildren", false}, {"Subscribe", true},
	{"Heartbeat", false}, {"ListWorkers", false}, {"RemoveWorker", false},
}

// The worker protocol's message handling on the server: whatever bytes a
// worker sends to whichever procedure, in the binary or the JSON form, the
// server answers (a result or an error with a code other than internal), never
// panics and never hangs. (CI fuzzes each target for a few seconds, see
// .ci/run; `go test -fuzz FuzzWorkerMessages ./server` explores longer.)
func FuzzWorkerMessages(f *testing.F) {
	st, err := trellis.OpenStore(context.Background(), "sqlite://"+filepath.Join(f.TempDir(), "fuzz.db"), time.Now)
	if err != nil {
		f.Fatal(err)
	}
	srv, err := New(context.Background(), Config{Backend: st, Listen: "127.0.0.1:0", Insecure: true, IdempotencyPurgeInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		srv.Shutdown(context.Background())
		st.Close()
	})
	lease := &pb.Lease{Namespace: "default", RunId: "r1", Token: 1}
	now := timestamppb.Now()
	seeds := map[string]proto.Message{
		"Claim":        &pb.ClaimRequest{Namespace: "default", Workflows: []string{"w"}, Worker: "w", Credit: 2, LeaseDuration: durationpb.New(time.Second), Wait: durationpb.New(time.Millisecond)},
		"ExtendLeases": &pb.ExtendLeasesRequest{Leases: []*pb.Lease{lease}, Duration: durationpb.New(time.Second)},
		"ReleaseLease": &pb.ReleaseLeaseRequest{Lease: lease},
		"Checkpoint": &pb.CheckpointRequest{Checkpoints: []*pb.CheckpointItem{{Lease: lease, Status: "waiting", WakeAt: now,
			Ops:       []*pb.Op{{Position: 0, Kind: "step", Name: "s", Done: true, Result: []byte(`1`), StartedAt: now}},
			Kv:        []*pb.KVWrite{{Key: "k", Value: []byte(`2`)}},
			Children:  []*pb.ChildGroup{{Position: 1, Runs: []*pb.ChildRun{{Id: "c", WorkflowId: "c", Workflow: "w", Queue: "q"}}}},
			Approvals: []*pb.ApprovalRequest{{Id: "a", Position: 2, Name: "ok"}}}}},
		"ResumeBlocked": &pb.ResumeBlockedRequest{Namespace: "default", Workflows: []string{"w"}},
		"ListHistory":   &pb.ListHistoryRequest{Namespace: "default", Ref: "r1"},
		"ListChildren":  &pb.ListChildrenRequest{Namespace: "default", Parent: "r1", Position: 1},
		"Subscribe":     &pb.SubscribeRequest{Namespace: "default", Topic: "run:default/r1"},
		"Heartbeat":     &pb.HeartbeatRequest{Namespace: "default", Name: "w", Workflows: []string{"w"}, Ttl: durationpb.New(time.Second)},
		"ListWorkers":   &pb.ListWorkersRequest{Namespace: "default"},
		"RemoveWorker":  &pb.RemoveWorkerRequest{Namespace: "__system__", Name: "w"},
	}
	for i, p := range fuzzProcedures {
		b, err := proto.Marshal(seeds[p.name])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), false, b)
		f.Add(uint8(i), false, b[:len(b)/2])
		f.Add(uint8(i), true, []byte(`{"namespace":"default","leases":[{"namespace":"x","token":"9"}],"checkpoints":[{"status":"bogus"}]}`))
	}
	f.Add(uint8(3), true, []byte(`{"checkpoints":[{"lease":{"namespace":"default","runId":"r1","token":"1"},"wakeAt":"9999-12-31T23:59:59Z","ops":[{"position":"-1"}]}]}`))
	f.Add(uint8(0), true, []byte(`{"namespace":"default","credit":"1001"}`))
	f.Fuzz(func(t *testing.T, which uint8, asJSON bool, body []byte) {
		p := fuzzProcedures[int(which)%len(fuzzProcedures)]
		ctype := "application/proto"
		if asJSON {
			ctype = "application/json"
		}
		if p.stream {
			ctype = "application/connect+" + ctype[len("application/"):]
			env := make([]byte, 5, 5+len(body))
			binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
			body = append(env, body...)
		}
		limit := 2 * time.Second
		if p.stream { // a subscription lives until its client goes, a claim up to its wait
			limit = 100 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		r := httptest.NewRequestWithContext(ctx, "POST", "/"+workerv1connect.WorkerServiceName+"/"+p.name, bytes.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, r)
		if ctx.Err() != nil && !p.stream {
			t.Fatalf("%s: no answer within 2s", p.name)
		}
		if code := connectCode(w.Body.Bytes(), p.stream, w.Code); code == "internal" || code == "unknown" {
			t.Fatalf("%s %q: %d %s", p.name, body, w.Code, w.Body)
		}
	})
}

// connectCode is the error code of a Connect response: of a unary one's JSON
// body, or of a stream's end message; "" on success.
func connectCode(b []byte, stream bool, status int) string {
	var e struct {
		Code  string `json:"code"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if !stream {
		if status == 200 {
			return ""
		}
		_ = json.Unmarshal(b, &e)
		return e.Code
	}
	for len(b) >= 5 {
		flags, n := b[0], int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			return "truncated"
		}
		if flags&2 != 0 {
			_ = json.Unmarshal(b[5:5+n], &e)
			if e.Error != nil {
				return e.Error.Code
			}
			return ""
		}
		b = b[5+n:]
	}
	return ""
}

// The checkpoint path behind the lease check: whatever a worker holding a
// valid lease puts in a checkpoint (ops, attempts, statuses, children,
// approvals, run-store writes, stream events, guards), the server answers
// without an internal error, and a refused checkpoint writes nothing: the run
// is as its claim left it, and no child, approval, value or stream event
// appears. Each input gets a fresh run claimed for it.
func FuzzCheckpointValidation(f *testing.F) {
	st, err := trellis.OpenStore(context.Background(), "sqlite://"+filepath.Join(f.TempDir(), "fuzz.db"), time.Now)
	if err != nil {
		f.Fatal(err)
	}
	srv, err := New(context.Background(), Config{Backend: st, Listen: "127.0.0.1:0", Insecure: true, IdempotencyPurgeInterval: -1,
		RetentionInterval: -1, Scheduler: SchedulerConfig{Disabled: true}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		srv.Shutdown(context.Background())
		st.Close()
	})
	now := timestamppb.Now()
	for _, it := range []*pb.CheckpointItem{
		{Status: "running", Ops: []*pb.Op{{Position: 0, Kind: "step", Name: "s", Done: true, Attempts: 1, Result: []byte(`1`), StartedAt: now}}},
		{Status: "succeeded", Output: []byte(`{"a":1}`), Kv: []*pb.KVWrite{{Key: "k", Value: []byte(`2`)}},
			Stream: []*pb.StreamWrite{{Name: "x", Data: []byte(`3`)}}},
		{Status: "waiting", WakeAt: now, WaitReason: "child", Ops: []*pb.Op{{Position: 0, Kind: "child", Name: "c"}},
			Children: []*pb.ChildGroup{{Position: 0, Runs: []*pb.ChildRun{{Id: "c", WorkflowId: "c", Workflow: "w", Queue: "q"}}}}},
		{Status: "waiting", WaitReason: "approval", Ops: []*pb.Op{{Position: 0, Kind: "approval", Name: "ok"}},
			Approvals: []*pb.ApprovalRequest{{Id: "a", Position: 0, Name: "ok", Details: []byte(`{}`)}}},
		{Status: "failed", Error: &pb.ErrorInfo{Message: "boom"}, Seq: 1},
		{Status: "bogus", Consume: []int64{1, 1}},
		{Status: "succeeded", Output: []byte("\"\xff\""), Kv: []*pb.KVWrite{{Key: "k", Value: []byte(`{"a":1,"a":2}`)}}},
	} {
		b, err := proto.Marshal(it)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var n int
	f.Fuzz(func(t *testing.T, body []byte) {
		it := &pb.CheckpointItem{}
		if proto.Unmarshal(body, it) != nil {
			return // the decoders' target covers undecodable messages
		}
		n++
		id := fmt.Sprint("f", n)
		ctx := context.Background()
		// A workflow of its own: a run an earlier input handed back is not claimed.
		if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: id, Queue: "default"}); err != nil {
			t.Fatal(err)
		}
		res, err := st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{id}, Worker: "fuzz", Max: 1, LeaseDuration: time.Minute})
		if err != nil || len(res.Runs) != 1 || res.Runs[0].Run.ID != id {
			t.Fatalf("claim: %v", err)
		}
		srv.leaseKeys.SignClaimed(res.Runs...)
		it.Lease = leaseOf(ww.ClaimedToPB(res.Runs)[0])
		msg, _ := proto.Marshal(&pb.CheckpointRequest{Checkpoints: []*pb.CheckpointItem{it}})
		r := httptest.NewRequestWithContext(ctx, "POST", "/"+workerv1connect.WorkerServiceName+"/Checkpoint", bytes.NewReader(msg))
		r.Header.Set("Content-Type", "application/proto")
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, r)
		refused := w.Code != 200
		if refused {
			if code := connectCode(w.Body.Bytes(), false, w.Code); code == "internal" || code == "unknown" {
				t.Fatalf("%v: %d %s", it, w.Code, w.Body)
			}
		} else {
			var out pb.CheckpointResponse
			if err := proto.Unmarshal(w.Body.Bytes(), &out); err != nil || len(out.Results) != 1 {
				t.Fatalf("answer %x: %v", w.Body.Bytes(), err)
			}
			if e := out.Results[0].Error; e != nil {
				refused = true
				if e.Reason == ww.ReasonInternal {
					t.Fatalf("%v: %v", it, e)
				}
			}
		}
		if refused {
			wantUnwritten(t, st, id, it)
		}
	})
}

// wantUnwritten checks that nothing of checkpoint it was written to run id.
func wantUnwritten(t *testing.T, st store.Store, id string, it *pb.CheckpointItem) {
	t.Helper()
	ctx := context.Background()
	run, err := st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: id})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := st.HistoryList(ctx, &store.HistoryListParams{Namespace: "default", Ref: id})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.StreamRead(ctx, &store.StreamReadParams{Namespace: "default", RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != store.StatusRunning || len(ops) > 0 || len(evs.Events) > 0 || len(run.Output) > 0 {
		t.Fatalf("refused checkpoint %v wrote: run %s, %d ops, %d stream events, output %q", it, run.Status, len(ops), len(evs.Events), run.Output)
	}
	for _, kv := range it.Kv {
		if _, err := st.KVGet(ctx, &store.KVGetParams{Namespace: "default", Ref: id, Key: kv.Key}); err == nil {
			t.Fatalf("refused checkpoint %v wrote value %q", it, kv.Key)
		}
	}
	for _, g := range it.Children {
		for _, c := range g.Runs {
			if c.Id == id {
				continue
			}
			if r, err := st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: c.Id}); err == nil && r.ParentID == id {
				t.Fatalf("refused checkpoint %v created child %q", it, c.Id)
			}
		}
	}
}
