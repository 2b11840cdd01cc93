package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/trellis-dev/trellis"
)

// kit holds the kit's workflows, made for one queue: every run and child of
// the kit stays in the queue the runner gave.
type kit struct {
	queue string
	brk   string // CONFORMANCE_BREAK: the workflow whose output is made wrong
	die   bool   // CONFORMANCE_DIE_IN_SLEEP: the worker SIGKILLs itself in conformance.sleep's step

	double *trellis.Workflow[num, int]
}

type num struct {
	N int `json:"n"`
}

func newKit(queue string, brk string, die bool) *kit {
	k := &kit{queue: queue, brk: brk, die: die}
	k.double = trellis.NewWorkflow("conformance.double", func(wc *trellis.Context, in num) (int, error) {
		return trellis.Step(wc, "double", func(context.Context) (int, error) { return in.N * 2, nil })
	}, k.opts())
	return k
}

func (k *kit) opts() trellis.WorkflowOptions { return trellis.WorkflowOptions{Queue: k.queue} }

// wf defines a workflow of the kit whose output is any JSON value; with
// CONFORMANCE_BREAK naming it, its output is replaced by a wrong one.
func wf[In any](k *kit, name string, fn func(*trellis.Context, In) (any, error)) trellis.Registrable {
	return trellis.NewWorkflow(name, func(wc *trellis.Context, in In) (any, error) {
		out, err := fn(wc, in)
		if err == nil && k.brk == name {
			out = map[string]any{"broken_on_purpose": true}
		}
		return out, err
	}, k.opts())
}

// none is the input of the workflows that take {}.
type none struct{}

// waitCtx waits d unless ctx ends first: a step that honours its signal.
func waitCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *kit) all() []trellis.Registrable {
	return []trellis.Registrable{
		k.double,
		wf(k, "conformance.three_steps", func(wc *trellis.Context, in struct {
			X int `json:"x"`
		}) (any, error) {
			a, err := trellis.Step(wc, "add", func(context.Context) (int, error) { return in.X + 1, nil })
			if err != nil {
				return nil, err
			}
			m, err := trellis.Step(wc, "mul", func(context.Context) (int, error) { return a * 10, nil })
			if err != nil {
				return nil, err
			}
			return trellis.Step(wc, "format", func(context.Context) (string, error) { return fmt.Sprint("result=", m), nil })
		}),

		wf(k, "conformance.retries", func(wc *trellis.Context, in struct {
			FailTimes int `json:"fail_times"`
		}) (any, error) {
			return trellis.Step(wc, "flaky", func(ctx context.Context) (string, error) {
				n := trellis.StepInfo(ctx).Attempt
				if n <= in.FailTimes {
					return "", fmt.Errorf("flaky failure %d", n)
				}
				return fmt.Sprint("ok after ", n), nil
			}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 4,
				// No jitter: the kit checks the gaps are at least the backoff.
				Backoff: trellis.ExponentialBackoff{Initial: 200 * time.Millisecond, Factor: 2}}})
		}),

		wf(k, "conformance.step_timeout", func(wc *trellis.Context, _ none) (any, error) {
			_, err := trellis.Step(wc, "slow", func(ctx context.Context) (string, error) {
				if err := waitCtx(ctx, 10*time.Second); err != nil {
					return "", err
				}
				return "finished", nil
			}, trellis.StepOptions{Timeout: 300 * time.Millisecond,
				Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(100 * time.Millisecond)}})
			var se *trellis.StepError
			if !errors.As(err, &se) {
				return nil, fmt.Errorf("step slow: want a step error, got %v", err)
			}
			return map[string]string{"error_type": se.Type}, nil
		}),

		wf(k, "conformance.sleep", func(wc *trellis.Context, in struct {
			Seconds float64 `json:"seconds"`
		}) (any, error) {
			if err := wc.Sleep(time.Duration(in.Seconds * float64(time.Second))); err != nil {
				return nil, err
			}
			return trellis.Step(wc, "after", func(context.Context) (string, error) {
				if k.die {
					// Two seconds into the kit, the other cases done: the
					// worker dies in the middle of this run.
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
				return "slept", nil
			})
		}),

		wf(k, "conformance.event_wait", func(wc *trellis.Context, _ none) (any, error) {
			p, err := trellis.WaitEvent[json.RawMessage](wc, "go", 60*time.Second)
			if err != nil {
				return nil, err
			}
			never := "received"
			if _, err := trellis.WaitEvent[json.RawMessage](wc, "never", time.Second); errors.Is(err, trellis.ErrEventTimeout) {
				never = "timeout"
			} else if err != nil {
				return nil, err
			}
			return map[string]any{"go": p, "never": never}, nil
		}),

		wf(k, "conformance.approval", func(wc *trellis.Context, _ none) (any, error) {
			d, err := trellis.Approval(wc, "ship", trellis.ApprovalOptions{Subject: "conformance: ship it?"})
			if err != nil {
				return nil, err
			}
			return map[string]bool{"approved": d.Approved}, nil
		}),

		wf(k, "conformance.child", func(wc *trellis.Context, in struct {
			N     int    `json:"n"`
			Queue string `json:"queue"` // another worker's queue, of any language (docs/conformance.md)
		}) (any, error) {
			return trellis.Child(wc, k.double, num{in.N}, trellis.ChildOptions{Queue: in.Queue})
		}),

		wf(k, "conformance.map", func(wc *trellis.Context, in struct {
			Count       int `json:"count"`
			Concurrency int `json:"concurrency"`
		}) (any, error) {
			items := make([]num, in.Count)
			for i := range items {
				items[i].N = i
			}
			return trellis.Map(wc, k.double, items, trellis.MapOptions{MaxConcurrency: in.Concurrency})
		}),

		wf(k, "conformance.select", func(wc *trellis.Context, _ none) (any, error) {
			timer := wc.NewTimer(60 * time.Second)
			pick := trellis.OnEvent[json.RawMessage](wc, "pick", 0)
			i, err := trellis.Select(wc, timer, pick)
			if err != nil {
				return nil, err
			}
			var v json.RawMessage
			if i == 1 {
				if v, err = pick.Get(wc); err != nil {
					return nil, err
				}
			}
			return map[string]any{"index": i, "value": v}, nil
		}),

		wf(k, "conformance.cancel", func(wc *trellis.Context, _ none) (any, error) {
			if _, err := trellis.Step(wc, "work", func(context.Context) (string, error) { return "worked", nil }); err != nil {
				return nil, err
			}
			_, err := trellis.WaitEvent[json.RawMessage](wc, "never", 0)
			if !errors.Is(err, trellis.ErrCancelled) {
				return nil, fmt.Errorf("event never: want a cancellation, got %v", err)
			}
			// The cleanup runs although the run is cancelled: a detached context.
			if _, cerr := trellis.Step(wc.Detached(), "cleanup", func(context.Context) (string, error) { return "cleaned", nil }); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}),

		wf(k, "conformance.kv", func(wc *trellis.Context, _ none) (any, error) {
			if err := wc.Set("a", 1); err != nil {
				return nil, err
			}
			if err := wc.Set("b", map[string]int{"x": 2}); err != nil {
				return nil, err
			}
			wc.Delete("a")
			var a, b json.RawMessage
			if _, err := wc.Get("a", &a); err != nil {
				return nil, err
			}
			if _, err := wc.Get("b", &b); err != nil {
				return nil, err
			}
			return map[string]any{"a": a, "b": b}, nil
		}),

		wf(k, "conformance.emit", func(wc *trellis.Context, _ none) (any, error) {
			if err := trellis.Emit(wc, "progress", map[string]int{"pct": 50}); err != nil {
				return nil, err
			}
			if _, err := trellis.Step(wc, "work", func(context.Context) (string, error) { return "w", nil }); err != nil {
				return nil, err
			}
			if err := trellis.Emit(wc, "progress", map[string]int{"pct": 100}); err != nil {
				return nil, err
			}
			return "done", nil
		}),

		wf(k, "conformance.nondeterminism", func(wc *trellis.Context, _ none) (any, error) {
			// Branching on the run's execution number is what a real workflow
			// must never do; here that is the point.
			name := "after"
			if wc.RunAttempt() <= 1 {
				name = "before"
			}
			if _, err := trellis.Step(wc, name, func(context.Context) (string, error) { return name, nil }); err != nil {
				return nil, err
			}
			if _, err := trellis.WaitEvent[json.RawMessage](wc, "next", 0); err != nil {
				return nil, err
			}
			return name, nil
		}),

		trellis.NewJob("conformance.job_sum", func(_ context.Context, in struct {
			A int `json:"a"`
			B int `json:"b"`
		}) (any, error) {
			if k.brk == "conformance.job_sum" {
				return in.A + in.B + 1, nil
			}
			return in.A + in.B, nil
		}, trellis.JobOptions{Queue: k.queue}),

		wf(k, "conformance.takeover", func(wc *trellis.Context, _ none) (any, error) {
			for _, s := range []struct {
				name, out string
				d         time.Duration
			}{{"before", "b", 0}, {"slow", "s", 4 * time.Second}, {"after", "a", 0}} {
				if _, err := trellis.Step(wc, s.name, func(ctx context.Context) (string, error) {
					if err := waitCtx(ctx, s.d); err != nil {
						return "", err
					}
					return s.out, nil
				}); err != nil {
					return nil, err
				}
			}
			return "survived", nil
		}),

		wf(k, "conformance.at_most_once", func(wc *trellis.Context, _ none) (any, error) {
			if _, err := trellis.Step(wc, "before", func(context.Context) (string, error) { return "b", nil }); err != nil {
				return nil, err
			}
			c, err := trellis.Step(wc, "charge", func(ctx context.Context) (string, error) {
				if err := waitCtx(ctx, 4*time.Second); err != nil {
					return "", err
				}
				return "c", nil
			}, trellis.StepOptions{AtMostOnce: true})
			var se *trellis.StepError
			if errors.As(err, &se) {
				return map[string]string{"error_type": se.Type}, nil
			}
			if err != nil {
				return nil, err
			}
			return map[string]string{"charged": c}, nil
		}),

		wf(k, "conformance.recorded", func(wc *trellis.Context, _ none) (any, error) {
			now := wc.Now()
			id := wc.UUID()
			_ = wc.Random()
			return map[string]string{"now": now.UTC().Format(time.RFC3339Nano), "uuid": id}, nil
		}),

		k.workflowRetry(),
	}
}

// workflowRetry is conformance.workflow_retry: the workflow is retried (3
// attempts, 100 ms then 200 ms); its step flaky (2 attempts per run attempt,
// 50 ms apart) fails while its attempt, numbered on across run attempts, is
// at most fail_times.
func (k *kit) workflowRetry() trellis.Registrable {
	const name = "conformance.workflow_retry"
	opts := k.opts()
	opts.Retry = &trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.ExponentialBackoff{Initial: 100 * time.Millisecond, Factor: 2}}
	return trellis.NewWorkflow(name, func(wc *trellis.Context, in struct {
		FailTimes int `json:"fail_times"`
	}) (any, error) {
		if _, err := trellis.Step(wc, "lookup", func(context.Context) (string, error) { return "found", nil }); err != nil {
			return nil, err
		}
		res, err := trellis.Step(wc, "flaky", func(ctx context.Context) (string, error) {
			n := trellis.StepInfo(ctx).Attempt
			if n <= in.FailTimes {
				return "", fmt.Errorf("flaky failure %d", n)
			}
			return fmt.Sprint("ok after ", n), nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(50 * time.Millisecond)}})
		if err != nil {
			return nil, err
		}
		var out any = map[string]any{"workflow_attempt": wc.WorkflowAttempt(), "result": res}
		if k.brk == name {
			out = map[string]any{"broken_on_purpose": true}
		}
		return out, nil
	}, opts)
}
