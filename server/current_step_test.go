package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// The step a run executes now, carried by its worker's lease heartbeat, is in
// the API's run (current_step) and on the run's UI page; it is gone once the
// run ends.
func TestCurrentStepInAPIAndUI(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			release := make(chan struct{})
			hold := trellis.NewWorkflow("hold-step", func(wc *trellis.Context, _ any) (string, error) {
				return trellis.Step(wc, "wait-for-release", func(ctx context.Context) (string, error) {
					select {
					case <-release:
						return "released", nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				})
			})
			w, err := trellis.Open(context.Background(), trellis.Config{Backend: e.st, Worker: trellis.WorkerOptions{
				PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second,
				LeaseDuration: 3 * time.Second, HeartbeatInterval: 50 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Register(context.Background(), hold); err != nil {
				t.Fatal(err)
			}
			run := e.start("hold-step", nil, nil)
			var got trellis.Run
			e.until(run.ID, func() bool {
				e.do("GET", "/v1/namespaces/default/runs/"+run.ID, "reader", nil).want(t, 200).decode(t, &got)
				return got.CurrentStep != nil
			})
			if s := got.CurrentStep; s.Name != "wait-for-release" || s.Attempt != 1 || time.Since(s.Since) > time.Minute {
				t.Fatalf("current_step = %+v", s)
			}
			raw := e.do("GET", "/v1/namespaces/default/runs/"+run.ID, "reader", nil).want(t, 200)
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(raw.body, &fields); err != nil || fields["current_step"] == nil {
				t.Fatalf("run JSON lacks current_step: %s", raw.body)
			}
			page := e.uiSession("reader").get("/ui/default/runs/" + run.ID)
			if !strings.Contains(string(page.body), "step wait-for-release, attempt 1") {
				t.Fatalf("run page does not show the step running now: %.2000s", page.body)
			}
			close(release)
			if done := e.waitRun(run.ID); done.CurrentStep != nil {
				t.Fatalf("finished run: current_step = %+v", done.CurrentStep)
			}
		})
	}
}
