package trellis_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/server"
)

// The Go client sends an Idempotency-Key with every mutating call: its whole
// remote path works against a server that requires one
// (server.Config.RequireIdempotencyKey, trellis server
// --require-idempotency-key), which refuses a request without a key.
func TestRemoteWithRequiredIdempotencyKeys(t *testing.T) {
	e := newRemoteEnv(t, func(c *server.Config) { c.RequireIdempotencyKey = true })
	ctx := ctxT(t)
	c := e.client

	// The server does refuse a change without a key.
	req, _ := http.NewRequest("POST", e.base+"/v1/namespaces/default/runs", strings.NewReader(`{"workflow":"remote-echo"}`))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 400 {
		t.Fatalf("a start without a key: %d, want 400", res.StatusCode)
	}

	// Runs: start (one and coalesced batches), events, cancel, reset, resume,
	// delete.
	h, err := trellis.Start(ctx, c, remoteEcho, map[string]any{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustResult(t, h); out["k"] != "v" {
		t.Fatalf("result %v", out)
	}
	results := must[[]trellis.StartResult](t)(c.StartMany(ctx, []trellis.StartRequest{
		{Workflow: "remote-echo", Input: []byte(`1`)}, {Workflow: "remote-echo", Input: []byte(`2`)}}))
	for _, r := range results {
		if r.Error != nil || !r.Created {
			t.Fatalf("batch start: %+v", r)
		}
	}
	must[*trellis.Run](t)(c.StartRaw(ctx, "remote-event", nil, trellis.StartOptions{ID: "ev"}))
	waitStatus(t, c, "ev", trellis.StatusWaiting)
	if err := c.SendEvent(ctx, "ev", "go", "now"); err != nil {
		t.Fatal(err)
	}
	done := must[*trellis.Run](t)(c.Wait(ctx, "ev"))
	reset := must[*trellis.Run](t)(c.Reset(ctx, done.ID, ""))
	waitStatus(t, c, reset.ID, trellis.StatusWaiting)
	if err := c.Cancel(ctx, reset.ID); err != nil {
		t.Fatal(err)
	}
	must[*trellis.Run](t)(c.Wait(ctx, reset.ID))
	if err := c.Resume(ctx, reset.ID); !errors.Is(err, trellis.ErrRunNotBlocked) && !errors.Is(err, trellis.ErrRunFinished) {
		t.Fatalf("resume of a finished run: %v, want the store's refusal, not a missing key", err)
	}
	if err := c.Delete(ctx, reset.ID); err != nil {
		t.Fatal(err)
	}

	// Approvals.
	run := must[*trellis.Run](t)(c.StartRaw(ctx, "remote-approval", nil, trellis.StartOptions{}))
	waitStatus(t, c, run.ID, trellis.StatusWaiting)
	page := must[*trellis.ApprovalList](t)(c.Approvals(ctx, trellis.ApprovalFilter{Run: run.ID}))
	if len(page.Approvals) != 1 {
		t.Fatalf("approvals: %+v", page.Approvals)
	}
	must[*trellis.ApprovalRecord](t)(c.Approve(ctx, page.Approvals[0].ID, "", "ok"))

	// Namespaces and queues.
	must[*trellis.Namespace](t)(c.CreateNamespace(ctx, trellis.NamespaceOptions{Name: "keyed"}))
	limit := 1000
	must[*trellis.Namespace](t)(c.UpdateNamespace(ctx, trellis.NamespaceUpdate{Name: "keyed", PayloadLimit: &limit}))
	conc := 2
	must[*trellis.Queue](t)(c.CreateQueue(ctx, "q", trellis.QueueSettings{}))
	must[*trellis.Queue](t)(c.UpdateQueue(ctx, "q", trellis.QueueSettings{ConcurrencyLimit: &conc}))
	must[*trellis.Queue](t)(c.PauseQueue(ctx, "q"))
	must[*trellis.Queue](t)(c.ResumeQueue(ctx, "q"))

	// Schedules.
	spec := trellis.ScheduleSpec{Workflow: "remote-echo", Cron: "0 3 * * *"}
	must[*trellis.Schedule](t)(c.CreateSchedule(ctx, "nightly", spec, trellis.CreateScheduleOptions{Paused: true}))
	spec.Cron = "0 4 * * *"
	must[*trellis.Schedule](t)(c.UpdateSchedule(ctx, "nightly", spec))
	must[*trellis.Schedule](t)(c.ResumeSchedule(ctx, "nightly"))
	must[*trellis.Schedule](t)(c.PauseSchedule(ctx, "nightly"))
	must[*trellis.Run](t)(c.TriggerSchedule(ctx, "nightly"))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if runs := must[[]*trellis.Run](t)(c.BackfillSchedule(ctx, "nightly", start, start.Add(48*time.Hour))); len(runs) != 2 {
		t.Fatalf("backfill: %d runs, want 2", len(runs))
	}
	if err := c.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
}
