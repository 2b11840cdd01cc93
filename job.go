package trellis

import (
	"context"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
)

// Job is a named, typed function run as a run with one step: Trellis as a job
// queue. A job takes the lighter path: a claim calls its function once and one
// write records the outcome, with no history to replay (see docs/jobs.md).
// Retries, backoffs, leases, cancellation, deadlines and priorities work as
// for any run. Create one with NewJob, register it like a workflow
// (Client.Register, Worker.Register) and start it with StartJob,
// Client.StartRaw or Client.StartMany.
type Job[In, Out any] struct {
	name string
	fn   func(context.Context, In) (Out, error)
	opts JobOptions
}

// JobOptions configure a job.
type JobOptions struct {
	// Queue is the default queue of its runs; "" means "default".
	Queue string
	// Version is stamped on every run at start (see WorkflowOptions.Version).
	Version int
	// Retry is the retry policy; the zero value means 3 attempts with
	// exponential backoff. A failed attempt with attempts left makes the run
	// wait for its backoff in the store, freeing the worker's slot.
	Retry RetryPolicy
	// Timeout bounds each attempt; 0 means no limit. The function must return
	// once its context is done: one that does not holds its worker's slot, and
	// once the timeout plus the store's grace (WorkerOptions.StepTimeoutGrace,
	// a server's --step-timeout-grace) passed, the store ends the run's lease,
	// records the attempt timed out and the job is retried by its policy,
	// here or on another worker; the hung attempt's outcome is then refused.
	Timeout time.Duration
}

// NewJob defines a job. The name identifies it in storage, as a workflow's
// does, and shares their name space: a job and a workflow cannot have the same
// name in one client. More than one JobOptions panics with an
// ErrInvalidOptions error, as NewWorkflow does.
func NewJob[In, Out any](name string, fn func(context.Context, In) (Out, error), opts ...JobOptions) *Job[In, Out] {
	return &Job[In, Out]{name: name, fn: fn, opts: mustOneOption("trellis.NewJob", opts)}
}

// Name returns the job's name.
func (j *Job[In, Out]) Name() string { return j.name }

func (j *Job[In, Out]) definition() *definition {
	p := j.opts.Retry.withDefaults()
	return &definition{
		name: j.name,
		opts: WorkflowOptions{Version: j.opts.Version, Queue: j.opts.Queue},
		eng: engine.Definition{Name: j.name, Job: &engine.Job{
			Options: engine.StepOptions{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff,
				NonRetryableTypes: p.NonRetryableTypes, Timeout: j.opts.Timeout,
				AttemptsDefault: j.opts.Retry.MaxAttempts <= 0, BackoffDefault: j.opts.Retry.Backoff == nil},
			Fn: func(ctx context.Context, codec engine.Codec, input []byte) ([]byte, error) {
				var in In
				if err := codec.Unmarshal(input, &in); err != nil {
					return nil, NonRetryable(fmt.Errorf("%w: %v", ErrInvalidInput, err))
				}
				out, err := j.fn(ctx, in)
				if err != nil {
					return nil, err
				}
				return codec.Marshal(out)
			},
		}},
		checkIn: func(codec Codec, input []byte) error {
			var in In
			if err := codec.Unmarshal(input, &in); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidInput, err)
			}
			return nil
		},
	}
}

// StartJob starts a run of job j with input in. The run is durable before
// StartJob returns; Handle.Result waits for its output.
func StartJob[In, Out any](ctx context.Context, c *Client, j *Job[In, Out], in In, opts ...StartOptions) (*Handle[Out], error) {
	o, err := oneOption("trellis.StartJob", opts)
	if err != nil {
		return nil, err
	}
	input, err := c.encode(in)
	if err != nil {
		return nil, err
	}
	run, err := c.start(ctx, j.definition(), input, o)
	if err != nil {
		return nil, err
	}
	return &Handle[Out]{c: c, id: run.WorkflowID, runID: run.ID}, nil
}
