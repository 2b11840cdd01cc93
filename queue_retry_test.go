package trellis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// queueRetryFlows returns a workflow whose step fails every attempt (no retry
// policy of its own, unless explicit is set: one attempt) and a job that does
// the same, counting their attempts.
func queueRetryFlows(prefix string, steps, jobs *atomic.Int32) (*trellis.Workflow[bool, int], *trellis.Job[int, int]) {
	wf := trellis.NewWorkflow(prefix+"-flow", func(wc *trellis.Context, explicit bool) (int, error) {
		var opts []trellis.StepOptions
		if explicit {
			opts = append(opts, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 1}})
		}
		return trellis.Step(wc, "fails", func(context.Context) (int, error) {
			steps.Add(1)
			return 0, errBoom
		}, opts...)
	})
	job := trellis.NewJob(prefix+"-job", func(context.Context, int) (int, error) {
		jobs.Add(1)
		return 0, errBoom
	})
	return wf, job
}

// A queue's default retry policy applies to the steps and jobs of its runs
// that have no policy of their own; an explicit policy wins; a change made
// through the client applies to the next run.
func TestQueueDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	var steps, jobs atomic.Int32
	wf, job := queueRetryFlows("qretry", &steps, &jobs)
	c := setup(t, wf, job)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "retrying", trellis.QueueSettings{
		Retry: &store.QueueRetry{MaxAttempts: 4, InitialBackoff: store.Duration(time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	on := trellis.StartOptions{Queue: "retrying"}
	run := func(explicit bool, want int32) {
		t.Helper()
		steps.Store(0)
		h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, explicit, on))
		if _, err := h.Result(ctx); !errors.Is(err, errBoom) && err == nil {
			t.Fatalf("result: %v, want the step's failure", err)
		}
		if got := steps.Load(); got != want {
			t.Fatalf("explicit=%v: %d attempts, want %d", explicit, got, want)
		}
	}
	run(false, 4) // the queue's policy
	run(true, 1)  // the step's own
	jobs.Store(0)
	hj := must[*trellis.Handle[int]](t)(trellis.StartJob(ctx, c, job, 0, on))
	if _, err := hj.Result(ctx); err == nil {
		t.Fatal("job succeeded")
	}
	if got := jobs.Load(); got != 4 {
		t.Fatalf("job: %d attempts, want the queue's 4", got)
	}
	if _, err := c.UpdateQueue(ctx, "retrying", trellis.QueueSettings{
		Retry: &store.QueueRetry{MaxAttempts: 2, InitialBackoff: store.Duration(time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	run(false, 2)
}

// A server gives the runs it pushes to a remote worker their queue's default
// retry policy: the worker cannot read queue records itself.
func TestQueueDefaultRetryPolicyRemote(t *testing.T) {
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			var steps, jobs atomic.Int32
			wf, job := queueRetryFlows("qretry-remote-"+name, &steps, &jobs)
			s := newWorkerServer(t, url(t))
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			atok := s.token(t, "a", auth.Grant{Role: auth.RoleAdmin, Namespace: "*"})
			startRemoteWorker(t, s.base, wtok, wf, job)
			c, err := trellis.Open(context.Background(), trellis.Config{Server: s.base, Token: atok})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := ctxT(t)
			if _, err := c.CreateQueue(ctx, "retrying", trellis.QueueSettings{
				Retry: &store.QueueRetry{MaxAttempts: 3, InitialBackoff: store.Duration(time.Millisecond)}}); err != nil {
				t.Fatal(err)
			}
			on := trellis.StartOptions{Queue: "retrying"}
			h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, false, on))
			if _, err := h.Result(ctx); err == nil {
				t.Fatal("workflow succeeded")
			}
			hj := must[*trellis.Handle[int]](t)(trellis.StartJob(ctx, c, job, 0, on))
			if _, err := hj.Result(ctx); err == nil {
				t.Fatal("job succeeded")
			}
			if s, j := steps.Load(), jobs.Load(); s != 3 || j != 3 {
				t.Fatalf("%d step attempts and %d job attempts, want the queue's 3 each", s, j)
			}
		})
	}
}
