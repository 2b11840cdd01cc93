package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-dev/trellis"
)

// runW1 starts n three-step workflows at once and waits for every result.
func runW1(ctx context.Context, c *trellis.Client, n int) (*Result, error) {
	return runW1With(ctx, c, n, Options{})
}

// runW1With is w1 with o.Clients: at most that many runs started and awaited
// at once, each from a goroutine of its own (0: all n at once). Bounded, the
// goroutines' stacks are reused: all at once, n = 20,000 goroutines each grow
// a stack of their own, fresh memory, which cost the bench a fifth of its CPU.
func runW1With(ctx context.Context, c *trellis.Client, n int, o Options) (*Result, error) {
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	slots := n
	if o.Clients > 0 {
		slots = o.Clients
	}
	sem := make(chan struct{}, slots)
	begin, cpu0 := time.Now(), processCPU()
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			h, err := trellis.Start(ctx, c, threeSteps, i)
			if err == nil {
				_, err = h.Result(ctx)
			}
			lat[i] = time.Since(t0)
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	wall, cpu := time.Since(begin), processCPU()-cpu0
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return nil, err
	}
	return &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(3*n) / wall.Seconds(),
		P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99), CPUMsPerRun: perRunMs(cpu, n),
	}, nil
}

// perRunMs is cpu per run in milliseconds (Result.CPUMsPerRun).
func perRunMs(cpu time.Duration, n int) *float64 {
	ms := float64(cpu) / float64(time.Millisecond) / float64(n)
	return &ms
}

// runW2 runs a 20-step workflow n times in a row and measures the interval between
// consecutive step starts.
func runW2(ctx context.Context, c *trellis.Client, n int) (*Result, error) {
	var per []time.Duration
	begin := time.Now()
	for i := range n {
		log := &timeLog{}
		id := fmt.Sprintf("w2-%d-%d", begin.UnixNano(), i)
		stepTimes.Store(id, log) // before the start, so the first step finds it
		h, err := trellis.Start(ctx, c, twentySteps, i, trellis.StartOptions{ID: id})
		if err != nil {
			return nil, err
		}
		if _, err := h.Result(ctx); err != nil {
			return nil, err
		}
		stepTimes.Delete(id)
		for j := 1; j < len(log.t); j++ {
			per = append(per, log.t[j].Sub(log.t[j-1]))
		}
	}
	wall := time.Since(begin)
	return &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(20*n) / wall.Seconds(),
		P50Ms: percentile(per, 50), P99Ms: percentile(per, 99),
	}, nil
}

// runW3 runs n one-step workflows one after the other, start to result.
func runW3(ctx context.Context, c *trellis.Client, n int) (*Result, error) {
	lat := make([]time.Duration, 0, n)
	begin := time.Now()
	for i := range n {
		t0 := time.Now()
		h, err := trellis.Start(ctx, c, oneStep, i)
		if err != nil {
			return nil, err
		}
		if _, err := h.Result(ctx); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	wall := time.Since(begin)
	return &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(n) / wall.Seconds(),
		P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99),
	}, nil
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}
