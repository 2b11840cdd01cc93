package trellis_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/server"
)

// scrapeServer reads the server's /metrics with token.
func (s *workerServer) scrape(t *testing.T, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), "GET", s.base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, b)
	}
	return string(b)
}

// A server's metrics cover its whole store from the moment it starts, before
// any request of the API opened a namespace: the unfinished runs, the workers
// connected in every namespace, the store's commits, the claims it makes for
// its remote workers and the leases they hold through it; after a restart as
// well.
func TestServerMetricsFromStart(t *testing.T) {
	t.Parallel()
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storeURL := url(t)
			s := newWorkerServer(t, storeURL)
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "*"})
			rtok := s.token(t, "prometheus", auth.Grant{Role: auth.RoleReader, Namespace: "*"})
			release := make(chan struct{})
			held := trellis.NewWorkflow("held", func(wc *trellis.Context, in int) (int, error) {
				return trellis.Step(wc, "hold", func(ctx context.Context) (int, error) {
					select {
					case <-release:
						return in, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
			})
			// The workers stop (deferred) before the restarted server below
			// (a cleanup), so that they can remove their records.
			for _, ns := range []string{"default", "other"} {
				cfg := trellis.Config{Server: s.base, Token: wtok, Namespace: ns}
				cfg.Worker.ShutdownGrace, cfg.Worker.LeaseDuration = 2*time.Second, 2*time.Second
				defer runWorker(t, cfg, held)()
			}
			// Runs started on the store by another process, not through the API.
			starter, err := trellis.Open(ctxT(t), trellis.Config{Backend: s.st, Worker: trellis.WorkerOptions{Disabled: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer starter.Close()
			var ids []string
			for i := range 2 {
				ids = append(ids, must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, held, i)).ID())
			}
			waitFor(t, func() bool { // both runs hold a lease, in their step
				for _, id := range ids {
					if r := must[*trellis.Run](t)(starter.Get(ctxT(t), id)); r.CurrentStep == nil {
						return false
					}
				}
				return true
			})
			text := s.scrape(t, rtok)
			for _, want := range []string{
				`trellis_active_leases 2`,
				`trellis_runs{namespace="default",queue="default",status="running"} 2`,
				`trellis_workers_connected{namespace="default"} 1`,
				`trellis_workers_connected{namespace="other"} 1`,
			} {
				if !strings.Contains(text, want+"\n") {
					t.Errorf("/metrics lacks %q:\n%s", want, grepLines(text, "trellis_"))
				}
			}
			for _, name := range []string{"trellis_claim_seconds_count", "trellis_store_commit_batch_size_count", "trellis_store_commit_seconds_count"} {
				if v := metricValue(text, name); v < 1 {
					t.Errorf("%s = %v, want at least 1", name, v)
				}
			}
			// A restarted server (same address, same store) counts them again
			// from the workers' next heartbeats, before any request of the API.
			addr := s.srv.Addr().String()
			sctx, cancel := context.WithTimeout(ctxT(t), 15*time.Second)
			defer cancel()
			if err := s.srv.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			s = newWorkerServerWith(t, storeURL, func(c *server.Config) { c.Listen = addr })
			waitFor(t, func() bool {
				text := s.scrape(t, rtok)
				return strings.Contains(text, "trellis_active_leases 2\n") &&
					strings.Contains(text, `trellis_workers_connected{namespace="other"} 1`+"\n")
			})
			close(release)
			for _, id := range ids {
				if r := must[*trellis.Run](t)(starter.Wait(ctxT(t), id)); r.Status != trellis.StatusSucceeded {
					t.Fatalf("run %s: %s", id, r.Status)
				}
			}
			waitFor(t, func() bool {
				return strings.Contains(s.scrape(t, rtok), "trellis_active_leases 0\n")
			})
			// The restarted server learnt the runs' leases from heartbeats: it
			// reads their workflow to count the runs' ends and steps.
			waitFor(t, func() bool {
				text := s.scrape(t, rtok)
				return strings.Contains(text, `trellis_runs_ended_total{status="succeeded",workflow="held"} 2`+"\n") &&
					strings.Contains(text, `trellis_step_attempts_total{outcome="ok",workflow="held"} 2`+"\n")
			})
			if text := s.scrape(t, rtok); strings.Contains(text, `trellis_runs{`) {
				t.Errorf("runs finished, yet trellis_runs reports some:\n%s", grepLines(text, "trellis_runs"))
			}
		})
	}
}

// runWorker runs a worker of cfg with wfs until the returned stop is called.
func runWorker(t *testing.T, cfg trellis.Config, wfs ...trellis.Registrable) (stop func()) {
	t.Helper()
	w, err := trellis.NewWorker(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctxT(t), wfs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}
}

// A server's metrics count the runs its remote workers end and the step
// attempts they make, from the checkpoints they send through it, by workflow:
// each failed attempt and each completed step, each run attempt by the status
// it left, each final status. A worker with metrics of its own counts the
// same in its own process.
func TestServerMetricsCountRemoteWorkersRuns(t *testing.T) {
	t.Parallel()
	s := newWorkerServer(t, sqliteURL(t))
	wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	rtok := s.token(t, "prometheus", auth.Grant{Role: auth.RoleReader, Namespace: "*"})
	var tries atomic.Int32
	retry := trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}}
	flaky := trellis.NewWorkflow("flaky", func(wc *trellis.Context, in int) (int, error) {
		a, err := trellis.Step(wc, "first", func(ctx context.Context) (int, error) {
			if tries.Add(1) == 1 {
				return 0, errors.New("first attempt fails")
			}
			return in, nil
		}, retry)
		if err != nil {
			return 0, err
		}
		return trellis.Step(wc, "second", func(ctx context.Context) (int, error) { return a + 1, nil })
	})
	broken := trellis.NewWorkflow("broken", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "fails", func(ctx context.Context) (int, error) { return 0, errors.New("always") },
			trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 1}})
	})
	workerMetrics := trellis.NewMetrics()
	cfg := trellis.Config{Server: s.base, Token: wtok, Metrics: workerMetrics}
	defer runWorker(t, cfg, flaky, broken)()
	starter := open(t, "", func(c *trellis.Config) { c.Backend, c.Worker.Disabled = s.st, true })
	ok := must[*trellis.Run](t)(starter.Wait(ctxT(t), must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, flaky, 1)).RunID()))
	bad := must[*trellis.Run](t)(starter.Wait(ctxT(t), must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, broken, 1)).RunID()))
	if ok.Status != trellis.StatusSucceeded || bad.Status != trellis.StatusFailed {
		t.Fatalf("runs %s and %s, want succeeded and failed", ok.Status, bad.Status)
	}
	want := []string{
		`trellis_runs_ended_total{status="succeeded",workflow="flaky"} 1`,
		`trellis_runs_ended_total{status="failed",workflow="broken"} 1`,
		`trellis_run_attempts_total{status="succeeded",workflow="flaky"} 1`,
		`trellis_run_attempts_total{status="failed",workflow="broken"} 1`,
		`trellis_step_attempts_total{outcome="ok",workflow="flaky"} 2`,
		`trellis_step_attempts_total{outcome="error",workflow="flaky"} 1`,
		`trellis_step_attempts_total{outcome="error",workflow="broken"} 1`,
		`trellis_step_attempt_duration_seconds_count{workflow="flaky"} 3`,
		`trellis_step_attempt_duration_seconds_count{workflow="broken"} 1`,
	}
	// The worker answers the run's end before its metrics are counted: wait.
	for _, text := range []func() string{func() string { return s.scrape(t, rtok) }, func() string { return scrape(t, workerMetrics) }} {
		waitFor(t, func() bool {
			got := text()
			for _, w := range want {
				if !strings.Contains(got, w+"\n") {
					return false
				}
			}
			return true
		})
	}
}
