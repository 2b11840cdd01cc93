package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// Request bodies.
type (
	// StartRequest starts a run by workflow name.
	StartRequest struct {
		Workflow    string              `json:"workflow"`
		ID          string              `json:"id,omitempty"`
		Input       json.RawMessage     `json:"input,omitempty"`
		Queue       string              `json:"queue,omitempty"`
		Priority    int                 `json:"priority,omitempty"`
		AvailableAt *time.Time          `json:"available_at,omitempty"`
		Deadline    *time.Time          `json:"deadline,omitempty"`
		Reuse       trellis.ReusePolicy `json:"reuse,omitempty"`
		// ConcurrencyKey counts the run against its queue's key limit.
		ConcurrencyKey string `json:"concurrency_key,omitempty"`
		// Version pins the run to this version of the workflow (1 to
		// 2147483647): only a worker that serves it claims the run. Absent or
		// 0: not pinned (trellis.StartOptions.Version).
		Version int `json:"version,omitempty"`
		// Retry is the run's workflow retry policy, stored with it: it
		// replaces the workflow's (docs/workflow-retries.md).
		Retry *trellis.RunRetry `json:"retry,omitempty"`
	}
	// ResetRequest names the step a reset starts again from ("" or absent: the beginning).
	ResetRequest struct {
		Step string `json:"step,omitempty"`
	}
	// EventRequest sends an event.
	EventRequest struct {
		Name    string          `json:"name"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}
	// DecideRequest carries a decision's comment; the principal is the token's.
	DecideRequest struct {
		Comment string `json:"comment,omitempty"`
	}
)

func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ *call) error {
	writeJSON(w, 200, Health{Status: "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ *call) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		// The route needs no token: the answer names no file, schema or
		// address; the log has the cause.
		s.cfg.Logger.Warn("not ready", "err", err)
		return fmt.Errorf("%w: store not ready (the server's log says why)", ErrUnavailable)
	}
	writeJSON(w, 200, Health{Status: "ready"})
	return nil
}

func (s *Server) startRun(w http.ResponseWriter, r *http.Request, c *call) error {
	var req StartRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	o, err := req.options()
	if err != nil {
		return err
	}
	// Authorize the queue the run will be in (the namespace's default queue
	// when the request names none) and start it in that very queue.
	if o.Queue, err = c.client.StartQueue(r.Context(), req.Workflow, o); err != nil {
		return err
	}
	if err := c.allowQueue(o.Queue); err != nil {
		return err
	}
	input := []byte(req.Input)
	if len(input) == 0 {
		input = []byte("null")
	}
	// A remote worker of this server waiting with a free slot gets the run
	// created claimed for it (see handoffs and Server.client).
	run, err := c.client.StartRaw(r.Context(), req.Workflow, input, o)
	if err != nil {
		return err
	}
	c.noteTarget(run.ID)
	reply(w, c, 201, run)
	return nil
}

// options checks a start request and turns it into StartOptions.
func (req *StartRequest) options() (trellis.StartOptions, error) {
	o := trellis.StartOptions{ID: req.ID, Queue: req.Queue, Priority: req.Priority, Reuse: req.Reuse,
		ConcurrencyKey: req.ConcurrencyKey, Version: req.Version}
	if err := store.ValidateName("workflow", req.Workflow); err != nil {
		return o, err
	}
	if req.ID != "" {
		if err := checkRef("id", req.ID); err != nil {
			return o, err
		}
	}
	if req.Queue != "" {
		if err := store.ValidateName("queue", req.Queue); err != nil {
			return o, err
		}
	}
	if req.Version < 0 || req.Version > store.MaxVersion {
		return o, fmt.Errorf("%w: version: want 1 to %d (or absent: not pinned), got %d", ErrInvalidArgument, store.MaxVersion, req.Version)
	}
	switch req.Reuse {
	case trellis.ReuseRejectActive, trellis.ReuseReject, trellis.ReuseReturnExisting:
	default:
		return o, fmt.Errorf("%w: reuse: want \"\", \"reject\" or \"return_existing\", got %q", ErrInvalidArgument, req.Reuse)
	}
	if req.AvailableAt != nil {
		o.StartAt = req.AvailableAt.UTC()
	}
	if req.Deadline != nil {
		o.Deadline = req.Deadline.UTC()
	}
	if r := req.Retry; r != nil {
		if err := r.Validate(); err != nil {
			return o, err
		}
		o.Retry = trellis.RetryPolicyOf(r)
	}
	return o, nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, c *call) error {
	q := parseQuery(r, runListParams)
	o := trellis.ListOptions{Workflow: q.str("workflow"), WorkflowID: q.str("workflow_id"), Queue: q.str("queue"),
		CreatedAfter: q.time("created_after"), CreatedBefore: q.time("created_before"),
		Limit: q.limit("limit", 1000), Cursor: q.str("page_token")}
	for _, st := range q.list("status") {
		if !trellis.Status(st).Valid() {
			q.fail("status: unknown run state %q", st)
		}
		o.Statuses = append(o.Statuses, trellis.Status(st))
	}
	if q.err != nil {
		return q.err
	}
	page, err := s.listRunPage(r.Context(), c, o)
	if err != nil {
		return err
	}
	writeJSON(w, 200, page)
	return nil
}

// listRunPage lists a page of runs for the API and the UI: o.Cursor is a page
// token (opened here, bound to the namespace and o's filter), and so is the
// page's NextCursor (sealed here).
func (s *Server) listRunPage(ctx context.Context, c *call, o trellis.ListOptions) (*trellis.RunPage, error) {
	filter := runsFilterOf(o)
	var err error
	if o.Cursor, err = s.openPage("runs", c.ns, filter, o.Cursor); err != nil {
		return nil, err
	}
	page, err := c.client.List(ctx, o)
	if err != nil {
		return nil, err
	}
	if page.NextCursor, err = s.sealPage("runs", c.ns, filter, page.NextCursor); err != nil {
		return nil, err
	}
	return page, nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, c *call) error {
	writeJSON(w, 200, c.run)
	return nil
}

func (s *Server) getHistory(w http.ResponseWriter, r *http.Request, c *call) error {
	h, err := c.client.ExportHistory(r.Context(), c.run.ID)
	if err != nil {
		return err
	}
	writeJSON(w, 200, h)
	return nil
}

// getResult answers the run once it ended (200) or, when wait is over (or the
// server stops), as it is (202).
func (s *Server) getResult(w http.ResponseWriter, r *http.Request, c *call) error {
	q := parseQuery(r, waitParams)
	wait := q.duration("wait", s.cfg.MaxWait)
	if q.err != nil {
		return q.err
	}
	// The middleware may have left the run to this handler (scopeRunLazy): with
	// a wait, the client's results watcher reads it, together with the other
	// runs waited for, rather than alone.
	run, ref := c.run, r.PathValue("id")
	if run != nil {
		ref = run.ID
	}
	switch {
	case run != nil && (run.Status.Terminal() || wait <= 0):
	case wait <= 0:
		var err error
		if run, err = c.client.Get(r.Context(), ref); err != nil {
			return err
		}
	default:
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		stop := context.AfterFunc(s.draining, cancel)
		defer stop()
		ended, err := c.client.Wait(ctx, ref)
		switch {
		case err == nil:
			run = ended
		case ctx.Err() != nil && r.Context().Err() == nil:
			if run, err = c.client.Get(r.Context(), ref); err != nil {
				return err
			}
		default:
			return err
		}
	}
	status := 200
	if !run.Status.Terminal() {
		status = 202
	}
	writeJSON(w, status, run)
	return nil
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.act(w, r, c, func(ctx context.Context) error { return c.client.Cancel(ctx, c.run.ID) })
}

func (s *Server) resumeRun(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.act(w, r, c, func(ctx context.Context) error { return c.client.Resume(ctx, c.run.ID) })
}

// act runs an action on c.run that takes no body (an empty JSON object is
// accepted) and answers the run after it.
func (s *Server) act(w http.ResponseWriter, r *http.Request, c *call, do func(context.Context) error) error {
	var empty struct{}
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &empty); err != nil {
		return err
	}
	if err := do(r.Context()); err != nil {
		return err
	}
	if c.keyed != nil && c.keyed.rendered {
		reply(w, c, 200, nil) // the run as the store returned it, recorded with the key
		return nil
	}
	run, err := c.client.Get(r.Context(), c.run.ID)
	if err != nil {
		return err
	}
	writeJSON(w, 200, run)
	return nil
}

func (s *Server) resetRun(w http.ResponseWriter, r *http.Request, c *call) error {
	var req ResetRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &req); err != nil {
		return err
	}
	run, err := c.client.Reset(r.Context(), c.run.ID, req.Step)
	if err != nil {
		return err
	}
	c.noteDetail("new run %s", run.ID)
	reply(w, c, 201, run)
	return nil
}

func (s *Server) sendEvent(w http.ResponseWriter, r *http.Request, c *call) error {
	var req EventRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	if err := checkRef("event name", req.Name); err != nil {
		return err
	}
	c.noteDetail("event %s", req.Name)
	payload := req.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if err := c.client.SendEvent(r.Context(), c.run.ID, req.Name, payload); err != nil {
		return err
	}
	reply(w, c, http.StatusNoContent, nil)
	return nil
}

func (s *Server) getValue(w http.ResponseWriter, r *http.Request, c *call) error {
	key := r.PathValue("key")
	if err := checkRef("key", key); err != nil {
		return err
	}
	var v json.RawMessage
	if err := c.client.Value(r.Context(), c.run.ID, key, &v); err != nil {
		return err
	}
	writeJSON(w, 200, Value{Key: key, Value: trellis.Payload(v)})
	return nil
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, c *call) error {
	q := parseQuery(r, approvalListParams)
	f := trellis.ApprovalFilter{Run: q.str("run"), Limit: q.limit("limit", 1000), Cursor: q.str("page_token")}
	for _, st := range q.list("status") {
		switch a := trellis.ApprovalStatus(st); a {
		case trellis.ApprovalPending, trellis.ApprovalApproved, trellis.ApprovalRejected, trellis.ApprovalExpired:
			f.Statuses = append(f.Statuses, a)
		default:
			q.fail("status: unknown approval state %q", st)
		}
	}
	if q.err != nil {
		return q.err
	}
	filter := approvalsFilterOf(f)
	var err error
	if f.Cursor, err = s.openPage("approvals", c.ns, filter, f.Cursor); err != nil {
		return err
	}
	page, err := c.client.Approvals(r.Context(), f)
	if err != nil {
		return err
	}
	if page.NextCursor, err = s.sealPage("approvals", c.ns, filter, page.NextCursor); err != nil {
		return err
	}
	writeJSON(w, 200, page)
	return nil
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.decide(w, r, c, true)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.decide(w, r, c, false)
}

// decide records a decision by the token's principal (never the body's).
func (s *Server) decide(w http.ResponseWriter, r *http.Request, c *call, approve bool) error {
	var req DecideRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &req); err != nil {
		return err
	}
	if err := checkApprover(c); err != nil {
		return err
	}
	decide := c.client.Reject
	if approve {
		decide = c.client.Approve
	}
	a, err := decide(r.Context(), c.approval.ID, c.principal.Name, req.Comment)
	if err != nil {
		return err
	}
	reply(w, c, 200, a)
	return nil
}

func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request, c *call) error {
	names, err := c.client.ServedWorkflows(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, 200, WorkflowList{Workflows: names})
	return nil
}

func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request, c *call) error {
	ws, err := c.client.Workers(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, 200, WorkerList{Workers: ws})
	return nil
}
