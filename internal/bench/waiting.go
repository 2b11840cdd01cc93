package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis"
)

var (
	// sleeper sleeps an hour: w4's runs wait, holding nothing in the worker.
	sleeper = trellis.NewWorkflow("bench-sleep-hour", func(wc *trellis.Context, _ int) (int, error) {
		return 0, wc.Sleep(time.Hour)
	})
	// eventWaiter waits for one event, then runs a step that notes when it ran.
	eventWaiter = trellis.NewWorkflow("bench-event", func(wc *trellis.Context, _ int) (string, error) {
		if _, err := trellis.WaitEvent[int](wc, "go", 0); err != nil {
			return "", err
		}
		return trellis.Step(wc, "next", func(context.Context) (string, error) {
			if v, ok := stepTimes.Load(wc.WorkflowID()); ok {
				v.(*timeLog).add(time.Now())
			}
			return payload, nil
		})
	})
)

// startConcurrently starts n runs of wf from a pool of goroutines.
func startConcurrently[Out any](ctx context.Context, c *trellis.Client, wf *trellis.Workflow[int, Out], n int, id func(int) string) error {
	const starters = 64
	next := make(chan int)
	errs := make(chan error, starters)
	var wg sync.WaitGroup
	for range starters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := trellis.StartOptions{}
				if id != nil {
					o.ID = id(i)
				}
				if _, err := trellis.Start(ctx, c, wf, i, o); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	return errors.Join(append([]error{err}, collect(errs)...)...)
}

// settled waits until no run of the namespace is pending or running.
func settled(ctx context.Context, c *trellis.Client) error {
	for {
		page, err := c.List(ctx, trellis.ListOptions{Statuses: []trellis.Status{trellis.StatusPending, trellis.StatusRunning}, Limit: 1})
		if err != nil {
			return err
		}
		if len(page.Runs) == 0 {
			return nil
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runW4 starts n runs that each sleep an hour and reports the time until all are
// waiting and the process's RSS before and after.
func runW4(ctx context.Context, c *trellis.Client, n int) (*Result, error) {
	idle, err := rssAfterGC()
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	if err := startConcurrently(ctx, c, sleeper, n, nil); err != nil {
		return nil, err
	}
	if err := settled(ctx, c); err != nil {
		return nil, err
	}
	wall := time.Since(begin)
	waiting, err := rssAfterGC()
	if err != nil {
		return nil, err
	}
	return &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(),
		RSSIdleMB: &idle, RSSWaitingMB: &waiting,
	}, nil
}

// runW6 starts n runs that each wait for an event, sends the n events one after
// the other, and measures from each send to the run's next step.
func runW6(ctx context.Context, c *trellis.Client, n int) (*Result, error) {
	prefix := fmt.Sprintf("w6-%d-", time.Now().UnixNano())
	logs := make([]*timeLog, n)
	for i := range logs {
		logs[i] = &timeLog{}
		stepTimes.Store(prefix+strconv.Itoa(i), logs[i])
	}
	defer func() {
		for i := range logs {
			stepTimes.Delete(prefix + strconv.Itoa(i))
		}
	}()
	id := func(i int) string { return prefix + strconv.Itoa(i) }
	if err := startConcurrently(ctx, c, eventWaiter, n, id); err != nil {
		return nil, err
	}
	if err := settled(ctx, c); err != nil {
		return nil, err
	}
	sent := make([]time.Time, n)
	begin := time.Now()
	for i := range n {
		sent[i] = time.Now()
		if err := c.SendEvent(ctx, id(i), "go", i); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, n)
	for i := range n {
		if _, err := c.Wait(ctx, id(i)); err != nil {
			return nil, err
		}
		logs[i].mu.Lock()
		if len(logs[i].t) != 1 {
			logs[i].mu.Unlock()
			return nil, fmt.Errorf("run %s ran its step %d times", id(i), len(logs[i].t))
		}
		lat[i] = logs[i].t[0].Sub(sent[i])
		logs[i].mu.Unlock()
	}
	wall := time.Since(begin)
	return &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(n) / wall.Seconds(),
		P50Ms: percentile(lat, 50), P99Ms: percentile(lat, 99),
	}, nil
}

// rssAfterGC returns the process's resident set in MB after a GC that returns
// freed memory to the OS.
func rssAfterGC() (float64, error) {
	runtime.GC()
	debug.FreeOSMemory()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("reading RSS: %w", err)
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("reading RSS: no VmRSS in /proc/self/status")
}
