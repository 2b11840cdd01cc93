package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis"
)

// w5Batch is how many jobs one StartMany call inserts.
const w5Batch = trellis.MaxStartMany

// runW5 inserts n one-step jobs with StartMany, w5Batch at a time, while no
// worker serves them; then registers the job, which wakes the embedded worker,
// and measures until every job is finished in the store. WorkflowsPerS (and
// StepsPerS) are jobs worked per second; InsertPerS is the insert rate.
func runW5(ctx context.Context, c *trellis.Client, n int) (*Result, error) {
	name := "bench-job-" + strconv.FormatInt(time.Now().UnixNano(), 36) // fresh: no leftovers of an earlier run
	var calls atomic.Int64
	job := trellis.NewJob(name, func(context.Context, int) (string, error) {
		calls.Add(1)
		return "ok", nil
	})
	insertBegin := time.Now()
	reqs := make([]trellis.StartRequest, 0, w5Batch)
	for i := 0; i < n; i += w5Batch {
		reqs = reqs[:0]
		for j := i; j < min(n, i+w5Batch); j++ {
			reqs = append(reqs, trellis.StartRequest{Workflow: name, Input: strconv.AppendInt(nil, int64(j), 10)})
		}
		res, err := c.StartMany(ctx, reqs)
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			if !r.Created {
				return nil, fmt.Errorf("a job was not created: %v", r.Error)
			}
		}
	}
	insert := time.Since(insertBegin)
	begin, cpu0 := time.Now(), processCPU()
	if err := c.Register(ctx, job); err != nil {
		return nil, err
	}
	// Every job has run once its function was called n times; it has finished
	// once no run of the job is left unfinished in the store.
	unfinished := []trellis.Status{trellis.StatusPending, trellis.StatusRunning, trellis.StatusWaiting}
	for {
		if calls.Load() >= int64(n) {
			page, err := c.List(ctx, trellis.ListOptions{Workflow: name, Statuses: unfinished, Limit: 1})
			if err != nil {
				return nil, err
			}
			if len(page.Runs) == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	wall, cpu := time.Since(begin), processCPU()-cpu0
	insertPerS := float64(n) / insert.Seconds()
	return &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(n) / wall.Seconds(),
		InsertPerS: &insertPerS, CPUMsPerRun: perRunMs(cpu, n),
	}, nil
}
