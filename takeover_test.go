package trellis_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/worker"
)

// envTakeoverStore names the store of TestTakeoverWorkerProcess.
const envTakeoverStore = "TRELLIS_TAKEOVER_STORE"

// takeoverWorkflow's step never returns in the worker process (it is killed while
// the step runs) and returns at once in the test's own worker.
var takeoverWorkflow = trellis.NewWorkflow("takeover-crash", func(wc *trellis.Context, n int) (int, error) {
	return trellis.Step(wc, "hang", func(ctx context.Context) (int, error) {
		if os.Getenv(envTakeoverStore) != "" {
			<-ctx.Done() // until SIGKILL
		}
		return n * 2, nil
	})
})

// TestTakeoverWorkerProcess is the worker process of TestCrashedWorkersRunIsTakenOver:
// a worker with the default configuration, running until killed.
func TestTakeoverWorkerProcess(t *testing.T) {
	url := os.Getenv(envTakeoverStore)
	if url == "" {
		t.Skip("runs only as the worker process of TestCrashedWorkersRunIsTakenOver")
	}
	workUntilKilled(t, trellis.Config{Store: url}, takeoverWorkflow)
}

// A worker with the default lease is killed while it runs a step; another worker
// takes the run over once the lease expires, within the default lease duration of
// the kill. The bound is checked on the recorded lease expiry, which every
// heartbeat sets to its own time plus the lease duration; the takeover time gets a
// generous margin for a loaded machine.
func TestCrashedWorkersRunIsTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a default lease to expire (10s); skipped in -short mode")
	}
	t.Parallel()
	url := storeURL(t)
	client := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), client, takeoverWorkflow, 21))
	proc := startTestProcess(t, "TestTakeoverWorkerProcess", envTakeoverStore+"="+url)
	defer proc.kill(t)
	held := waitStatus(t, client, h.RunID(), trellis.StatusRunning)
	for held.CurrentStep == nil { // its heartbeat reports the step: the attempt is seen
		time.Sleep(50 * time.Millisecond)
		held = must[*trellis.Run](t)(client.Get(ctxT(t), h.RunID()))
	}

	proc.kill(t)
	killed := time.Now()
	run := must[*trellis.Run](t)(client.Get(ctxT(t), h.RunID()))
	if run.LeaseExpiresAt == nil || run.LeaseOwner != held.LeaseOwner {
		t.Fatalf("killed worker's run: lease owner %q expiring at %v, want %q's lease", run.LeaseOwner, run.LeaseExpiresAt, held.LeaseOwner)
	}
	expires := *run.LeaseExpiresAt
	if limit := killed.Add(worker.DefaultLeaseDuration); expires.After(limit) {
		t.Fatalf("the dead worker's lease expires at %v, more than the default lease (%v) after the kill at %v",
			expires, worker.DefaultLeaseDuration, killed)
	}

	takeover := open(t, url) // the default lease too
	register(t, takeover, takeoverWorkflow)
	ctx, cancel := context.WithTimeout(context.Background(), worker.DefaultLeaseDuration+30*time.Second)
	defer cancel()
	if got, err := h.Result(ctx); err != nil || got != 42 {
		t.Fatalf("result after takeover: %d, %v", got, err)
	}
	run = must[*trellis.Run](t)(client.Get(ctxT(t), h.RunID()))
	hist := must[[]*trellis.Op](t)(client.History(ctxT(t), h.RunID()))
	if run.Attempts != 2 || len(hist) != 1 || hist[0].Kind != trellis.OpStep || hist[0].Attempts != 2 ||
		len(hist[0].AttemptLog) != 1 || hist[0].AttemptLog[0].Outcome != trellis.AttemptLost || hist[0].AttemptStartedAt == nil {
		t.Fatalf("run after takeover: %d attempts, history %+v; want the dead worker's attempt lost, the step done at attempt 2",
			run.Attempts, hist)
	}
	took := *hist[0].AttemptStartedAt // the step's attempt started by the new owner
	if took.Before(expires) {
		t.Fatalf("run taken over at %v, before the dead worker's lease expired at %v", took, expires)
	}
	const margin = 5 * time.Second
	if took.After(killed.Add(worker.DefaultLeaseDuration + margin)) {
		t.Fatalf("run taken over %v after the kill, want within %v + %v", took.Sub(killed), worker.DefaultLeaseDuration, margin)
	}
	t.Logf("lease expired %v after the kill; taken over %v after the kill", expires.Sub(killed), took.Sub(killed))
}
