package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func storeURL(t *testing.T) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "t.db")
}

// result is what a command printed and its exit status.
type result struct {
	stdout, stderr string
	code           int
}

// trellisCmd runs the command line args as main does, capturing its output.
func trellisCmd(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(ctxT(t), args, &out, &errOut)
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// ok fails the test unless the command succeeded.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

func contains(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// seeded is a store holding finished runs, made with small workflows of the tests.
type seeded struct {
	url              string
	okRun, failedRun string // run IDs
	okID, failedID   string // workflow IDs
	flakyCalls       atomic.Int32
	workflows        []trellis.Registrable // the seed's workflows, to replay its histories
}

// seed opens a store, runs a succeeding run (whose step fails once) and a failing
// run to completion, and closes the client.
func seed(t *testing.T) *seeded {
	t.Helper()
	s := &seeded{url: storeURL(t)}
	okWF := trellis.NewWorkflow("ok", func(wc *trellis.Context, n int) (int, error) {
		return trellis.Step(wc, "flaky", func(ctx context.Context) (int, error) {
			if s.flakyCalls.Add(1) == 1 {
				return 0, errors.New("first attempt fails")
			}
			return n * 2, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
	})
	failWF := trellis.NewWorkflow("fails", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "doomed", func(ctx context.Context) (int, error) {
			return 0, trellis.NonRetryable(errors.New("card declined"))
		})
	})
	s.workflows = []trellis.Registrable{okWF, failWF}
	c := openClient(t, s.url, false, okWF, failWF)
	defer c.Close()
	s.okRun, s.okID = startAndWait(t, c, okWF, "seed-ok")
	s.failedRun, s.failedID = startAndWait(t, c, failWF, "seed-fail")
	return s
}

// openClient opens a client on url (with a worker unless noWorker) and registers wfs.
func openClient(t *testing.T, url string, noWorker bool, wfs ...trellis.Registrable) *trellis.Client {
	t.Helper()
	c, err := trellis.Open(ctxT(t), trellis.Config{Store: url, Worker: trellis.WorkerOptions{
		Disabled: noWorker, PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(ctxT(t), wfs...); err != nil {
		t.Fatal(err)
	}
	return c
}

func startAndWait(t *testing.T, c *trellis.Client, wf *trellis.Workflow[int, int], id string) (runID, workflowID string) {
	t.Helper()
	h, err := trellis.Start(ctxT(t), c, wf, 21, trellis.StartOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	return h.RunID(), h.ID()
}

// listRuns returns every run of the store at url (at most one page).
func listRuns(t *testing.T, url string) []*trellis.Run {
	t.Helper()
	c := openClient(t, url, true)
	defer c.Close()
	page, err := c.List(ctxT(t), trellis.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return page.Runs
}
