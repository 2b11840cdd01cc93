package storetest

import (
	"testing"

	"github.com/trellis-dev/trellis/store"
)

var resumeCases = []testCase{
	{"Blocked", resumeBlocked},
	{"NotBlocked", resumeNotBlocked},
	{"Finished", resumeFinished},
	{"ResumeBlockedByWorkflow", resumeByWorkflow},
	{"ResumeBlockedOfQueues", resumeByQueue},
}

func (e *env) resume(ref string) (*store.Run, error) {
	return e.st.RunResume(e.ctx, &store.RunResumeParams{Namespace: ns, Ref: ref})
}

func resumeBlocked(t *testing.T, e *env) {
	cr := e.start()
	e.block(cr)
	r, err := e.resume(cr.Run.ID)
	if err != nil {
		t.Fatalf("RunResume: %v", err)
	}
	for _, got := range []*store.Run{r, e.get(cr.Run.ID)} {
		if got.Status != store.StatusPending {
			t.Fatalf("resumed run = %+v, want pending", got)
		}
	}
	wantTime(t, "AvailableAt", r.AvailableAt, e.clk.Now())
	again := e.claimOne(cr.Run.ID)
	if again.LeaseToken <= cr.LeaseToken {
		t.Fatalf("token after resume = %d, want > %d", again.LeaseToken, cr.LeaseToken)
	}
}

func resumeNotBlocked(t *testing.T, e *env) {
	pending := e.create(withWorkflow("later"))
	running := e.start()
	waiting := e.start()
	e.checkpoint(waiting, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event"})
	for id, status := range map[string]store.Status{
		pending.ID: store.StatusPending, running.Run.ID: store.StatusRunning, waiting.Run.ID: store.StatusWaiting,
	} {
		_, err := e.resume(id)
		wantErr(t, "RunResume of a "+string(status)+" run", err, store.ErrRunNotBlocked)
		e.wantStatus(id, status)
	}
}

func resumeFinished(t *testing.T, e *env) {
	cr := e.start()
	e.finish(cr)
	_, err := e.resume(cr.Run.ID)
	wantErr(t, "RunResume of a succeeded run", err, store.ErrRunFinished)
	e.wantStatus(cr.Run.ID, store.StatusSucceeded)
}

func resumeByWorkflow(t *testing.T, e *env) {
	var mine []string
	for range 2 {
		cr := e.start()
		e.block(cr)
		mine = append(mine, cr.Run.ID)
	}
	otherWF := e.create(withWorkflow("b"))
	e.block(e.claimOne(otherWF.ID, claimWorkflows("b")))
	otherNS := e.create(withNamespace("ns2"))
	e.block(e.claimOne(otherNS.ID, claimIn("ns2")))
	waiting := e.start()
	e.checkpoint(waiting, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event"})

	n, err := e.st.RunsResumeBlocked(e.ctx, &store.RunsResumeBlockedParams{Namespace: ns, Workflows: []string{wf, "c"}})
	if err != nil || n != 2 {
		t.Fatalf("RunsResumeBlocked = %d, %v; want 2", n, err)
	}
	for _, id := range mine {
		e.wantStatus(id, store.StatusPending)
	}
	wantIDSet(t, "claimable after resume", e.claimIDs(), mine)
	e.wantStatus(otherWF.ID, store.StatusBlocked)
	e.wantStatus(waiting.Run.ID, store.StatusWaiting)
	if r := e.getIn("ns2", otherNS.ID); r.Status != store.StatusBlocked {
		t.Fatalf("run of namespace ns2 = %s, want still blocked", r.Status)
	}
	n, err = e.st.RunsResumeBlocked(e.ctx, &store.RunsResumeBlockedParams{Namespace: ns, Workflows: []string{wf}})
	if err != nil || n != 0 {
		t.Fatalf("second RunsResumeBlocked = %d, %v; want 0", n, err)
	}
}

// RunsResumeBlocked with Queues resumes the blocked runs of those queues only.
func resumeByQueue(t *testing.T, e *env) {
	blocked := map[string]string{}
	for _, q := range []string{"q1", "q2", "q3"} {
		cr := e.start(withQueue(q))
		e.block(cr)
		blocked[q] = cr.Run.ID
	}
	n, err := e.st.RunsResumeBlocked(e.ctx, &store.RunsResumeBlockedParams{Namespace: ns, Workflows: []string{wf},
		Queues: []string{"q1", "q3"}})
	if err != nil || n != 2 {
		t.Fatalf("RunsResumeBlocked(q1, q3) = %d, %v; want 2", n, err)
	}
	e.wantStatus(blocked["q1"], store.StatusPending)
	e.wantStatus(blocked["q2"], store.StatusBlocked)
	e.wantStatus(blocked["q3"], store.StatusPending)
}
