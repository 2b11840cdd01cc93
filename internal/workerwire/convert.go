// Package workerwire converts between the storage contract's records (package
// store) and the worker protocol's messages (trellis.worker.v1), and maps the
// contract's sentinel errors to Connect codes with a stable reason and back.
// The server (package server) and the remote client (store/storeremote) share
// it, so both ends agree on every field.
package workerwire

import (
	"maps"
	"math"
	"slices"
	"time"

	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Ts converts a time; the zero time becomes nil.
//
//lint:ignore ST1003 Ts is short for timestamp (the protocol's Timestamp), not the initialism TS.
func Ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// TsPtr converts an optional time.
//
//lint:ignore ST1003 Ts is short for timestamp (the protocol's Timestamp), not the initialism TS.
func TsPtr(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// Time converts back; nil becomes the zero time, in UTC otherwise.
func Time(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// TimePtr converts back an optional time.
func TimePtr(t *timestamppb.Timestamp) *time.Time {
	if t == nil {
		return nil
	}
	v := t.AsTime()
	return &v
}

// Dur converts a duration.
func Dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// Duration converts back a duration (nil is 0).
func Duration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func errInfo(e *store.ErrorInfo) *pb.ErrorInfo {
	if e == nil {
		return nil
	}
	return &pb.ErrorInfo{Message: e.Message, Type: e.Type, NonRetryable: e.NonRetryable}
}

func errInfoFrom(e *pb.ErrorInfo) *store.ErrorInfo {
	if e == nil {
		return nil
	}
	return &store.ErrorInfo{Message: e.Message, Type: e.Type, NonRetryable: e.NonRetryable}
}

// RunToPB converts a run.
func RunToPB(r *store.Run) *pb.Run {
	if r == nil {
		return nil
	}
	return &pb.Run{
		Namespace: r.Namespace, Id: r.ID, WorkflowId: r.WorkflowID, Workflow: r.Workflow, Queue: r.Queue,
		Priority: int64(r.Priority), Status: string(r.Status), Version: int64(r.Version), Sequence: r.Sequence,
		Input: r.Input, Output: r.Output, Error: errInfo(r.Error), WaitReason: r.WaitReason,
		CancelRequested: r.CancelRequested, Deadline: TsPtr(r.Deadline), AvailableAt: Ts(r.AvailableAt),
		Attempts: int64(r.Attempts), LeaseOwner: r.LeaseOwner, LeaseExpiresAt: TsPtr(r.LeaseExpiresAt),
		CreatedAt: Ts(r.CreatedAt), StartedAt: TsPtr(r.StartedAt), UpdatedAt: Ts(r.UpdatedAt),
		FinishedAt: TsPtr(r.FinishedAt), ParentId: r.ParentID, TraceParent: r.TraceParent,
		CurrentStep: stepPtrToPB(r.CurrentStep), Pinned: r.Pinned,
		WorkflowAttempt:  workflowAttemptToPB(r.WorkflowAttempt),
		WorkflowAttempts: runAttemptsToPB(r.WorkflowAttempts), Retry: RunRetryToPB(r.Retry),
	}
}

// StepToPB converts a step in progress (the zero RunStep: none).
func StepToPB(s store.RunStep) *pb.RunStep {
	st := &pb.RunStep{Name: s.Name, Attempt: int64(s.Attempt), Position: int64(s.Position)}
	if !s.Since.IsZero() {
		st.Since = Ts(s.Since)
	}
	if s.Timeout != 0 { // (a negative one is sent, for the server to refuse)
		st.Timeout = Dur(s.Timeout)
	}
	return st
}

// StepFromPB converts a step in progress back.
func StepFromPB(s *pb.RunStep) store.RunStep {
	if s == nil {
		return store.RunStep{}
	}
	st := store.RunStep{Name: s.Name, Attempt: int(s.Attempt), Position: int(s.Position), Timeout: Duration(s.Timeout)}
	if s.Since != nil {
		st.Since = Time(s.Since)
	}
	return st
}

func stepPtrToPB(s *store.RunStep) *pb.RunStep {
	if s == nil {
		return nil
	}
	return StepToPB(*s)
}

// RunFromPB converts a run back.
func RunFromPB(r *pb.Run) *store.Run {
	if r == nil {
		return nil
	}
	return &store.Run{
		Namespace: r.Namespace, ID: r.Id, WorkflowID: r.WorkflowId, Workflow: r.Workflow, Queue: r.Queue,
		Priority: int(r.Priority), Status: store.Status(r.Status), Version: int(r.Version), Sequence: r.Sequence,
		Input: r.Input, Output: r.Output, Error: errInfoFrom(r.Error), WaitReason: r.WaitReason,
		CancelRequested: r.CancelRequested, Deadline: TimePtr(r.Deadline), AvailableAt: Time(r.AvailableAt),
		Attempts: int(r.Attempts), LeaseOwner: r.LeaseOwner, LeaseExpiresAt: TimePtr(r.LeaseExpiresAt),
		CreatedAt: Time(r.CreatedAt), StartedAt: TimePtr(r.StartedAt), UpdatedAt: Time(r.UpdatedAt),
		FinishedAt: TimePtr(r.FinishedAt), ParentID: r.ParentId, TraceParent: r.TraceParent,
		CurrentStep: stepPtrFromPB(r.CurrentStep), Pinned: r.Pinned,
		WorkflowAttempt:  max(int(r.WorkflowAttempt), 1),
		WorkflowAttempts: runAttemptsFromPB(r.WorkflowAttempts), Retry: RunRetryFromPB(r.Retry),
	}
}

func stepPtrFromPB(s *pb.RunStep) *store.RunStep {
	if s == nil || s.Name == "" {
		return nil
	}
	st := StepFromPB(s)
	return &st
}

// RunsToPB converts runs.
func RunsToPB(rs []*store.Run) []*pb.Run {
	out := make([]*pb.Run, len(rs))
	for i, r := range rs {
		out[i] = RunToPB(r)
	}
	return out
}

// RunsFromPB converts runs back.
func RunsFromPB(rs []*pb.Run) []*store.Run {
	out := make([]*store.Run, len(rs))
	for i, r := range rs {
		out[i] = RunFromPB(r)
	}
	return out
}

func attemptToPB(a store.Attempt) *pb.Attempt {
	e := a.Error
	return &pb.Attempt{Position: int64(a.Position), Attempt: int64(a.Attempt), Error: errInfo(&e),
		StartedAt: Ts(a.StartedAt), FinishedAt: Ts(a.FinishedAt), Outcome: a.Outcome}
}

func attemptFromPB(a *pb.Attempt) store.Attempt {
	out := store.Attempt{Position: int(a.Position), Attempt: int(a.Attempt),
		StartedAt: Time(a.StartedAt), FinishedAt: Time(a.FinishedAt), Outcome: a.Outcome}
	if e := errInfoFrom(a.Error); e != nil {
		out.Error = *e
	}
	return out
}

// AttemptsToPB converts attempts.
func AttemptsToPB(as []store.Attempt) []*pb.Attempt {
	if len(as) == 0 {
		return nil
	}
	out := make([]*pb.Attempt, len(as))
	for i, a := range as {
		out[i] = attemptToPB(a)
	}
	return out
}

// AttemptsFromPB converts attempts back.
func AttemptsFromPB(as []*pb.Attempt) []store.Attempt {
	if len(as) == 0 {
		return nil
	}
	out := make([]store.Attempt, len(as))
	for i, a := range as {
		out[i] = attemptFromPB(a)
	}
	return out
}

// OpsToPB converts ops.
func OpsToPB(ops []*store.Op) []*pb.Op {
	out := make([]*pb.Op, len(ops))
	for i, o := range ops {
		out[i] = &pb.Op{Position: int64(o.Position), Kind: string(o.Kind), Name: o.Name, Done: o.Done,
			Result: o.Result, Error: errInfo(o.Error), Attempts: int64(o.Attempts), AttemptLog: AttemptsToPB(o.AttemptLog),
			StartedAt: Ts(o.StartedAt), FinishedAt: TsPtr(o.FinishedAt), AttemptStartedAt: TsPtr(o.AttemptStartedAt)}
	}
	return out
}

// OpsFromPB converts ops back.
func OpsFromPB(ops []*pb.Op) []*store.Op {
	out := make([]*store.Op, len(ops))
	for i, o := range ops {
		out[i] = &store.Op{Position: int(o.Position), Kind: store.OpKind(o.Kind), Name: o.Name, Done: o.Done,
			Result: o.Result, Error: errInfoFrom(o.Error), Attempts: int(o.Attempts), AttemptLog: AttemptsFromPB(o.AttemptLog),
			StartedAt: Time(o.StartedAt), FinishedAt: TimePtr(o.FinishedAt), AttemptStartedAt: TimePtr(o.AttemptStartedAt)}
	}
	return out
}

func eventsToPB(es []*store.Event) []*pb.Event {
	out := make([]*pb.Event, len(es))
	for i, e := range es {
		out[i] = &pb.Event{Seq: e.Seq, Namespace: e.Namespace, RunId: e.RunID, Name: e.Name, Payload: e.Payload, SentAt: Ts(e.SentAt)}
	}
	return out
}

func eventsFromPB(es []*pb.Event) []*store.Event {
	out := make([]*store.Event, len(es))
	for i, e := range es {
		out[i] = &store.Event{Seq: e.Seq, Namespace: e.Namespace, RunID: e.RunId, Name: e.Name, Payload: e.Payload, SentAt: Time(e.SentAt)}
	}
	return out
}

// ClaimedToPB converts claimed runs.
func ClaimedToPB(crs []*store.ClaimedRun) []*pb.ClaimedRun {
	out := make([]*pb.ClaimedRun, len(crs))
	for i, c := range crs {
		out[i] = &pb.ClaimedRun{Run: RunToPB(c.Run), LeaseToken: c.LeaseToken, LeaseExpiresAt: Ts(c.LeaseExpiresAt),
			History: OpsToPB(c.History), Inbox: eventsToPB(c.Inbox), QueueRetry: queueRetryToPB(c.QueueRetry),
			LeaseSecret: c.LeaseSecret, PayloadLimit: int64(c.PayloadLimit)}
	}
	return out
}

// ClaimedFromPB converts claimed runs back.
func ClaimedFromPB(crs []*pb.ClaimedRun) []*store.ClaimedRun {
	out := make([]*store.ClaimedRun, len(crs))
	for i, c := range crs {
		out[i] = &store.ClaimedRun{Run: RunFromPB(c.Run), LeaseToken: c.LeaseToken, LeaseExpiresAt: Time(c.LeaseExpiresAt),
			History: OpsFromPB(c.History), Inbox: eventsFromPB(c.Inbox), QueueRetry: queueRetryFromPB(c.QueueRetry),
			LeaseSecret: c.LeaseSecret, PayloadLimit: clampInt(c.PayloadLimit)}
	}
	return out
}

func queueRetryToPB(r *store.QueueRetry) *pb.QueueRetry {
	if r == nil {
		return nil
	}
	out := &pb.QueueRetry{MaxAttempts: int64(r.MaxAttempts)}
	if r.InitialBackoff > 0 {
		out.InitialBackoff = Dur(time.Duration(r.InitialBackoff))
	}
	if r.MaxBackoff > 0 {
		out.MaxBackoff = Dur(time.Duration(r.MaxBackoff))
	}
	return out
}

// queueRetryFromPB converts a queue's policy back; one that is not valid (a
// server of another version, a faulty one) is dropped: the SDK's defaults apply.
func queueRetryFromPB(r *pb.QueueRetry) *store.QueueRetry {
	if r == nil || r.MaxAttempts < 1 || r.MaxAttempts > 1_000_000 {
		return nil
	}
	out := &store.QueueRetry{MaxAttempts: int(r.MaxAttempts)}
	if d := Duration(r.InitialBackoff); d > 0 {
		out.InitialBackoff = store.Duration(d)
	}
	if d := Duration(r.MaxBackoff); d > 0 {
		out.MaxBackoff = store.Duration(d)
	}
	return out
}

// LeaseToPB converts a lease.
func LeaseToPB(l store.Lease) *pb.Lease {
	return &pb.Lease{Namespace: l.Namespace, RunId: l.RunID, Token: l.Token, Queue: l.Queue, Secret: l.Secret}
}

// LeaseFromPB converts a lease back (nil is the zero lease).
func LeaseFromPB(l *pb.Lease) store.Lease {
	if l == nil {
		return store.Lease{}
	}
	return store.Lease{Namespace: l.Namespace, RunID: l.RunId, Token: l.Token, Queue: l.Queue, Secret: l.Secret}
}

// CheckpointToPB converts a checkpoint.
func CheckpointToPB(p *store.CheckpointParams) *pb.CheckpointItem {
	it := &pb.CheckpointItem{Lease: LeaseToPB(p.Lease), Ops: OpsToPB(p.Ops), Attempts: AttemptsToPB(p.Attempts),
		Status: string(p.Status), Output: p.Output, Error: errInfo(p.Error), WaitReason: p.WaitReason,
		WakeAt: TsPtr(p.WakeAt), WaitEvents: p.WaitEvents, NoEvents: p.NoEvents, Consume: p.Consume,
		ExpireApprovals: p.ExpireApprovals, Seq: p.Seq, Retry: RunRetryToPB(p.Retry)}
	for _, kv := range p.KV {
		it.Kv = append(it.Kv, &pb.KVWrite{Key: kv.Key, Value: kv.Value, Delete: kv.Delete})
	}
	for _, g := range p.Children {
		pg := &pb.ChildGroup{Position: int64(g.Position), MaxConcurrency: int64(g.MaxConcurrency), FailFast: g.FailFast, Detached: g.Detached}
		for _, r := range g.Runs {
			pg.Runs = append(pg.Runs, &pb.ChildRun{Id: r.ID, WorkflowId: r.WorkflowID, Workflow: r.Workflow, Queue: r.Queue,
				Priority: int64(r.Priority), Version: int64(r.Version), Input: r.Input, Deadline: TsPtr(r.Deadline),
				TraceParent: r.TraceParent})
		}
		it.Children = append(it.Children, pg)
	}
	for _, a := range p.Approvals {
		it.Approvals = append(it.Approvals, &pb.ApprovalRequest{Id: a.ID, Position: int64(a.Position), Name: a.Name,
			Approvers: a.Approvers, Subject: a.Subject, Details: a.Details, ExpiresAt: TsPtr(a.ExpiresAt)})
	}
	for _, e := range p.Stream {
		it.Stream = append(it.Stream, &pb.StreamWrite{Name: e.Name, Data: e.Data})
	}
	return it
}

// CheckpointFromPB converts a checkpoint back. Children are created in the
// namespace of the lease (the parent's).
func CheckpointFromPB(it *pb.CheckpointItem) *store.CheckpointParams {
	p := &store.CheckpointParams{Lease: LeaseFromPB(it.Lease), Ops: OpsFromPB(it.Ops), Attempts: AttemptsFromPB(it.Attempts),
		Status: store.Status(it.Status), Output: it.Output, Error: errInfoFrom(it.Error), WaitReason: it.WaitReason,
		WakeAt: TimePtr(it.WakeAt), WaitEvents: it.WaitEvents, NoEvents: it.NoEvents, Consume: it.Consume,
		ExpireApprovals: it.ExpireApprovals, Seq: it.Seq, Retry: RunRetryFromPB(it.Retry)}
	if len(p.Ops) == 0 {
		p.Ops = nil
	}
	for _, kv := range it.Kv {
		p.KV = append(p.KV, store.KVWrite{Key: kv.Key, Value: kv.Value, Delete: kv.Delete})
	}
	for _, g := range it.Children {
		sg := &store.ChildGroup{Position: int(g.Position), MaxConcurrency: int(g.MaxConcurrency), FailFast: g.FailFast, Detached: g.Detached}
		for _, r := range g.Runs {
			sg.Runs = append(sg.Runs, &store.RunCreateParams{Namespace: p.Lease.Namespace, ID: r.Id, WorkflowID: r.WorkflowId,
				Workflow: r.Workflow, Queue: r.Queue, Priority: int(r.Priority), Version: int(r.Version), Input: r.Input,
				Deadline: TimePtr(r.Deadline), TraceParent: r.TraceParent})
		}
		p.Children = append(p.Children, sg)
	}
	for _, a := range it.Approvals {
		p.Approvals = append(p.Approvals, &store.ApprovalRequest{ID: a.Id, Position: int(a.Position), Name: a.Name,
			Approvers: a.Approvers, Subject: a.Subject, Details: a.Details, ExpiresAt: TimePtr(a.ExpiresAt)})
	}
	for _, e := range it.Stream {
		p.Stream = append(p.Stream, store.StreamWrite{Name: e.Name, Data: e.Data})
	}
	return p
}

// WorkersToPB converts worker records.
func WorkersToPB(ws []*store.Worker) []*pb.Worker {
	out := make([]*pb.Worker, len(ws))
	for i, w := range ws {
		out[i] = &pb.Worker{Namespace: w.Namespace, Name: w.Name, Workflows: w.Workflows, Queues: w.Queues, Version: w.Version,
			StartedAt: Ts(w.StartedAt), LastSeenAt: Ts(w.LastSeenAt), ExpiresAt: Ts(w.ExpiresAt), Live: w.Live, Owner: w.Owner,
			Versions: VersionsToPB(w.Versions)}
	}
	return out
}

// WorkersFromPB converts worker records back.
func WorkersFromPB(ws []*pb.Worker) []*store.Worker {
	out := make([]*store.Worker, len(ws))
	for i, w := range ws {
		out[i] = &store.Worker{Namespace: w.Namespace, Name: w.Name, Workflows: w.Workflows, Queues: w.Queues, Version: w.Version,
			StartedAt: Time(w.StartedAt), LastSeenAt: Time(w.LastSeenAt), ExpiresAt: Time(w.ExpiresAt), Live: w.Live, Owner: w.Owner,
			Versions: VersionsFromPB(w.Versions)}
	}
	return out
}

// VersionsToPB converts the versions a worker serves, by workflow name.
func VersionsToPB(vs map[string][]int) []*pb.WorkflowVersions {
	if len(vs) == 0 {
		return nil
	}
	out := make([]*pb.WorkflowVersions, 0, len(vs))
	for _, wf := range slices.Sorted(maps.Keys(vs)) {
		v := &pb.WorkflowVersions{Workflow: wf, Versions: make([]int64, len(vs[wf]))}
		for i, n := range vs[wf] {
			v.Versions[i] = int64(n)
		}
		out = append(out, v)
	}
	return out
}

// VersionsFromPB converts the versions a worker serves back (nil for none). A
// workflow listed twice serves the versions of both entries. A version out of
// int's range becomes -1, which the store refuses (store.ValidateVersions).
func VersionsFromPB(vs []*pb.WorkflowVersions) map[string][]int {
	if len(vs) == 0 {
		return nil
	}
	out := make(map[string][]int, len(vs))
	for _, v := range vs {
		list := out[v.Workflow]
		for _, n := range v.Versions {
			if n < 0 || n > math.MaxInt32 {
				n = -1
			}
			list = append(list, int(n))
		}
		out[v.Workflow] = list
	}
	return out
}

// clampInt is n as an int, 0 when negative (a limit of none).
func clampInt(n int64) int {
	if n < 0 {
		return 0
	}
	return int(min(n, int64(math.MaxInt32)))
}

// RunRetryToPB converts a workflow retry policy (nil: none).
func RunRetryToPB(r *store.RunRetry) *pb.RunRetry {
	if r == nil {
		return nil
	}
	out := &pb.RunRetry{MaxAttempts: int64(r.MaxAttempts), Factor: r.Factor, Jitter: r.Jitter,
		NonRetryableTypes: r.NonRetryableTypes}
	out.InitialBackoff = Dur(time.Duration(r.InitialBackoff)) // nil for 0
	out.MaxBackoff = Dur(time.Duration(r.MaxBackoff))
	return out
}

// RunRetryFromPB converts a workflow retry policy back (nil: none); the store
// validates it.
func RunRetryFromPB(r *pb.RunRetry) *store.RunRetry {
	if r == nil {
		return nil
	}
	return &store.RunRetry{MaxAttempts: int(min(max(r.MaxAttempts, -1), 1<<30)), InitialBackoff: store.Duration(Duration(r.InitialBackoff)),
		Factor: r.Factor, MaxBackoff: store.Duration(Duration(r.MaxBackoff)), Jitter: r.Jitter, NonRetryableTypes: r.NonRetryableTypes}
}

func runAttemptsToPB(as []store.RunAttempt) []*pb.RunAttempt {
	if len(as) == 0 {
		return nil
	}
	out := make([]*pb.RunAttempt, len(as))
	for i, a := range as {
		e := a.Error
		pa := &pb.RunAttempt{Attempt: int64(a.Attempt), Error: errInfo(&e), StartedAt: Ts(a.StartedAt),
			FailedAt: Ts(a.FailedAt), RetryAt: Ts(a.RetryAt)}
		for _, s := range a.Steps {
			pa.Steps = append(pa.Steps, &pb.RetriedStep{Position: int64(s.Position), Name: s.Name, Attempts: int64(s.Attempts)})
		}
		out[i] = pa
	}
	return out
}

func runAttemptsFromPB(as []*pb.RunAttempt) []store.RunAttempt {
	if len(as) == 0 {
		return nil
	}
	out := make([]store.RunAttempt, len(as))
	for i, a := range as {
		sa := store.RunAttempt{Attempt: int(a.Attempt), StartedAt: Time(a.StartedAt), FailedAt: Time(a.FailedAt), RetryAt: Time(a.RetryAt)}
		if e := errInfoFrom(a.Error); e != nil {
			sa.Error = *e
		}
		for _, s := range a.Steps {
			sa.Steps = append(sa.Steps, store.RetriedStep{Position: int(s.Position), Name: s.Name, Attempts: int(s.Attempts)})
		}
		out[i] = sa
	}
	return out
}

// workflowAttemptToPB is a run's workflow attempt on the wire: unset (0) for
// the first, which readers take as 1.
func workflowAttemptToPB(n int) int64 {
	if n <= 1 {
		return 0
	}
	return int64(n)
}
