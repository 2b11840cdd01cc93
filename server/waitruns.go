package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
)

// maxWaitRuns caps the runs of one GET runs:wait (their IDs fit the 4 KiB a
// query parameter may hold).
const maxWaitRuns = 100

// WaitLine is one line of GET runs:wait's answer (application/x-ndjson): a run
// of the list that ended, or one that does not exist, or the last line.
type WaitLine struct {
	// Run is a run of the list that has ended (succeeded, failed or
	// cancelled), with its output or error, as GET .../result answers it.
	Run *trellis.Run `json:"run,omitempty"`
	// Missing is the ID of a run of the list that the namespace does not hold.
	Missing string `json:"missing,omitempty"`
	// Done marks the last line: every run of the list has ended or is
	// missing, or the wait is over and Waiting lists those that have not
	// ended. An answer that stops without it was cut: wait again for the
	// runs it did not report.
	Done    bool     `json:"done,omitempty"`
	Waiting []string `json:"waiting,omitempty"`
	// Error, on the last line instead of Done, is why the server stopped
	// waiting (its store failed, or it is stopping): wait again.
	Error *Problem `json:"error,omitempty"`
}

// waitRuns serves GET /v1/namespaces/{ns}/runs:wait?runs=ID,ID,...&wait=30s:
// one long poll for many runs, answered line by line as they end, so that a
// client waiting for many runs at once (the Go client's Handle.Result under
// load) sends one request per batch instead of one per run, and each run is
// read once for all of them (the namespace's results watcher).
func (s *Server) waitRuns(w http.ResponseWriter, r *http.Request, c *call) error {
	q := parseQuery(r, waitRunsParams)
	wait := q.duration("wait", s.cfg.MaxWait)
	list := q.str("runs")
	if q.err != nil {
		return q.err
	}
	ids, err := runIDList(list)
	if err != nil {
		return err
	}
	if err := s.allowRuns(r.Context(), c, ids); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	stop := context.AfterFunc(s.draining, cancel)
	defer stop()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	var werr error // the client's connection failed: nothing more is written
	write := func(l WaitLine) {
		if werr == nil {
			werr = enc.Encode(l)
		}
	}
	flush := func() {
		if werr == nil {
			werr = rc.Flush()
		}
	}
	flush() // the client knows the runs are waited for
	left := make(map[string]bool, len(ids))
	for _, id := range ids {
		left[id] = true
	}
	err = s.core.WaitRuns(ctx, c.ns, ids, func(id string, run any) {
		delete(left, id)
		if run == nil {
			write(WaitLine{Missing: id})
			return
		}
		write(WaitLine{Run: run.(*trellis.Run)})
	}, flush)
	switch {
	case werr != nil || r.Context().Err() != nil:
		return nil // the client went away
	case err == nil || ctx.Err() != nil:
		last := WaitLine{Done: true}
		for _, id := range ids {
			if left[id] {
				last.Waiting = append(last.Waiting, id)
			}
		}
		write(last)
	default:
		p, known := problemFor(err)
		if !known {
			s.cfg.Logger.Error("waiting for runs", "namespace", c.ns, "runs", len(ids), "err", err)
		}
		p.RequestID = w.Header().Get(RequestIDHeader)
		write(WaitLine{Error: &p})
	}
	flush()
	return nil
}

// runIDList reads the runs parameter of runs:wait: 1 to maxWaitRuns run IDs
// separated by commas, each given once.
func runIDList(list string) ([]string, error) {
	if list == "" {
		return nil, fmt.Errorf("%w: runs: the IDs of the runs to wait for, separated by commas, are required", ErrInvalidArgument)
	}
	ids := strings.Split(list, ",")
	if len(ids) > maxWaitRuns {
		return nil, fmt.Errorf("%w: runs: %d run IDs; at most %d per request", ErrInvalidArgument, len(ids), maxWaitRuns)
	}
	for i, id := range ids {
		if err := checkRef("run ID", id); err != nil {
			return nil, fmt.Errorf("runs: %w", err)
		}
		if slices.Contains(ids[:i], id) {
			return nil, fmt.Errorf("%w: runs: run ID %q given twice", ErrInvalidArgument, id)
		}
	}
	return ids, nil
}

// allowRuns checks the principal's role on the queue of each run of ids that
// exists: nothing to read when its grant covers the whole namespace. One run
// outside its grant refuses the whole request, as GET .../result refuses that
// run.
func (s *Server) allowRuns(ctx context.Context, c *call, ids []string) error {
	if c.allowQueue("") == nil {
		return nil
	}
	runs, err := s.store.RunsGet(blobs.WithOmitLarge(ctx), &store.RunsGetParams{Namespace: c.ns, IDs: ids})
	if err != nil {
		return err
	}
	for _, run := range runs {
		if err := c.allowQueue(run.Queue); err != nil {
			return err
		}
	}
	return nil
}
