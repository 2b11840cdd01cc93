package main

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// Times, and the times inside wait reasons, are printed to the millisecond (in
// tables to the second), never with nanoseconds.
func TestTimesWithoutNanoseconds(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wfs := map[string]*trellis.Workflow[int, int]{
		"sleeping until": trellis.NewWorkflow("sleeps", func(wc *trellis.Context, _ int) (int, error) {
			return 0, wc.Sleep(time.Hour + time.Nanosecond)
		}),
		`event "go" until`: trellis.NewWorkflow("awaits", func(wc *trellis.Context, _ int) (int, error) {
			return trellis.WaitEvent[int](wc, "go", time.Hour+time.Nanosecond)
		}),
		`approval "ok"`: trellis.NewWorkflow("asks", func(wc *trellis.Context, _ int) (int, error) {
			_, err := trellis.Approval(wc, "ok", trellis.ApprovalOptions{Timeout: time.Hour + time.Nanosecond})
			return 0, err
		}),
		"retry backoff": trellis.NewWorkflow("retries", func(wc *trellis.Context, _ int) (int, error) {
			return trellis.Step(wc, "flaky", func(context.Context) (int, error) { return 0, errors.New("not yet") },
				trellis.StepOptions{Retry: trellis.RetryPolicy{Backoff: trellis.Fixed(time.Hour + time.Nanosecond)}})
		}),
	}
	var all []trellis.Registrable
	for _, wf := range wfs {
		all = append(all, wf)
	}
	c := openClient(t, url, false, all...)
	t.Cleanup(func() { c.Close() })
	msTime := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`)
	tooFine := regexp.MustCompile(`:\d\d\.\d{4,}`)
	for reason, wf := range wfs {
		h, err := trellis.Start(ctxT(t), c, wf, 0)
		if err != nil {
			t.Fatal(err)
		}
		waitReason(t, c, h.RunID(), reason)
		for _, args := range [][]string{{"runs", "get", h.RunID()}, {"runs", "history", h.RunID()}, {"runs", "list"}, {"approvals", "list"}} {
			res := trellisCmd(t, append(args, "--store", url)...).ok(t)
			if tooFine.MatchString(res.stdout) {
				t.Errorf("%q prints sub-millisecond times:\n%s", args, res.stdout)
			}
		}
		res := trellisCmd(t, "runs", "get", h.RunID(), "--store", url).ok(t)
		if !regexp.MustCompile(`Wait reason:\s+.*` + regexp.QuoteMeta(reason) + `.*` + msTime.String()).MatchString(res.stdout) {
			t.Errorf("wait reason of %s without a time to the millisecond:\n%s", wf.Name(), res.stdout)
		}
	}
}
