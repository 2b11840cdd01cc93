package trellis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/internal/problem"
	"github.com/trellis-dev/trellis/store"
)

// remoteWait is how long one long poll of Wait and Handle.Result asks the
// server to wait; a 202 answer starts the next.
const remoteWait = 30 * time.Second

// remote is a client's link to a Trellis server (Config.Server): each client
// method becomes a call of the public HTTP API (docs/http-api.md), whose JSON
// is the SDK's records.
type remote struct {
	hc *httpc.Client
	ns string // path-escaped namespace prefix: /v1/namespaces/{ns}
	// pollWait is the wait of a result long poll, in nanoseconds (see wait).
	pollWait atomic.Int64
	closed   atomic.Bool
	starts   *starts // coalesces concurrent starts
	waits    *waits  // batches concurrent waits (Handle.Result)
	// maxAnswer bounds an answer, or a line of one, read from the server.
	maxAnswer int64
}

// close makes later calls fail with ErrClosed, fails the starts waiting to be
// sent and drops idle connections.
func (r *remote) close() {
	r.closed.Store(true)
	r.starts.close()
	r.waits.close()
	r.hc.Close()
}

func newRemote(cfg Config) (*remote, error) {
	// A run's answer holds its input and output: room for both and more.
	maxAnswer := max(httpc.DefaultMaxAnswer, 3*int64(cfg.MaxPayloadBytes)+1<<20)
	hc, err := httpc.New(httpc.Config{Base: cfg.Server, Token: cfg.Token, TLSConfig: cfg.TLSConfig, MaxAnswer: maxAnswer})
	if err != nil {
		return nil, fmt.Errorf("opening trellis: %w", err)
	}
	r := &remote{hc: hc, ns: "/v1/namespaces/" + url.PathEscape(cfg.Namespace), maxAnswer: maxAnswer}
	r.starts = newStarts(r)
	r.waits = newWaits(r)
	r.pollWait.Store(int64(remoteWait))
	return r, nil
}

// RemoteError is an error answer of a Trellis server: its HTTP status, stable
// code and detail. It wraps the SDK sentinel of its code, so errors.Is works
// against a server as against a store.
type RemoteError struct {
	Status int
	Code   string
	Detail string
	err    error
}

func (e *RemoteError) Error() string { return e.Detail }

// Unwrap returns the sentinel of the code (nil for an unknown code).
func (e *RemoteError) Unwrap() error { return e.err }

// remoteErr turns a transport error or a problem into the client's error.
func remoteErr(err error) error {
	p, ok := httpc.IsProblem(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	e := &RemoteError{Status: p.Status, Code: p.Code, Detail: p.Error()}
	if entry, ok := problem.Of(p.Code); ok { // the server's table (internal/problem)
		e.err = entry.Err
	}
	return e
}

// do makes a call and maps its error.
func (r *remote) do(ctx context.Context, call httpc.Call) (int, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	status, err := r.hc.Do(ctx, call)
	if err != nil {
		return status, remoteErr(err)
	}
	return status, nil
}

func (r *remote) runPath(ref string, tail ...string) string {
	p := r.ns + "/runs/" + url.PathEscape(ref)
	for _, t := range tail {
		p += "/" + t
	}
	return p
}

// startBody is the body of POST /runs (server.StartRequest).
type startBody struct {
	Workflow    string          `json:"workflow"`
	ID          string          `json:"id,omitempty"`
	Input       json.RawMessage `json:"input,omitempty"`
	Queue       string          `json:"queue,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	AvailableAt *time.Time      `json:"available_at,omitempty"`
	Deadline    *time.Time      `json:"deadline,omitempty"`
	Reuse       ReusePolicy     `json:"reuse,omitempty"`
	// ConcurrencyKey is StartOptions.ConcurrencyKey.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// Version is StartOptions.Version (0: not pinned).
	Version int `json:"version,omitempty"`
	// Retry is StartOptions.Retry.
	Retry *store.RunRetry `json:"retry,omitempty"`
}

func (r *remote) start(ctx context.Context, def *definition, input []byte, o StartOptions) (*Run, error) {
	if len(input) > 0 && !json.Valid(input) {
		return nil, fmt.Errorf("starting %s: %w: a server takes JSON inputs (Config.Codec must encode JSON)", def.name, ErrInvalidInput)
	}
	return r.starts.start(ctx, def.name, startBodyOf(runParams("", def, "", input, o, ""), o))
}

// startBodyOf is the body of POST runs, or an item of POST runs:batch, that
// starts the run p describes (runParams of the same options o).
func startBodyOf(p *store.RunCreateParams, o StartOptions) startBody {
	return startBody{Workflow: p.Workflow, ID: o.ID, Input: p.Input, Queue: p.Queue, Priority: p.Priority,
		AvailableAt: p.AvailableAt, Deadline: p.Deadline, Reuse: o.Reuse, ConcurrencyKey: p.ConcurrencyKey,
		Version: o.Version, Retry: p.Retry}
}

// startBatch starts runs with POST runs:batch and returns one result per run,
// in order.
func (r *remote) startBatch(ctx context.Context, runs []startBody) ([]StartResult, error) {
	var out StartManyResponse
	call := httpc.Call{Method: http.MethodPost, Path: r.ns + "/runs:batch", Body: startManyBody{Runs: runs}, Out: &out}
	if _, err := r.do(ctx, call); err != nil {
		return nil, err
	}
	if len(out.Results) != len(runs) {
		return nil, fmt.Errorf("%w: %d results for %d runs", ErrUnavailable, len(out.Results), len(runs))
	}
	return out.Results, nil
}

// startOne starts one run with POST /runs.
func (r *remote) startOne(ctx context.Context, name string, body startBody) (*Run, error) {
	var run Run
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodPost, Path: r.ns + "/runs", Body: body, Out: &run}); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return &run, nil
}

func (r *remote) get(ctx context.Context, ref string) (*Run, error) {
	var run Run
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.runPath(ref), Out: &run}); err != nil {
		return nil, err
	}
	return &run, nil
}

func (r *remote) list(ctx context.Context, o ListOptions) (*RunPage, error) {
	q := url.Values{}
	setNonZero(q, "workflow_id", o.WorkflowID)
	if len(o.Statuses) > 0 {
		ss := make([]string, len(o.Statuses))
		for i, s := range o.Statuses {
			ss[i] = string(s)
		}
		q.Set("status", strings.Join(ss, ","))
	}
	setNonZero(q, "workflow", o.Workflow)
	setNonZero(q, "queue", o.Queue)
	setNonZero(q, "page_token", o.Cursor)
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if !o.CreatedAfter.IsZero() {
		q.Set("created_after", o.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !o.CreatedBefore.IsZero() {
		q.Set("created_before", o.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	var page RunPage
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.ns + "/runs", Query: q, Out: &page}); err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	return &page, nil
}

func setNonZero(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

func (r *remote) children(ctx context.Context, ref string, position int) ([]*Run, error) {
	var l struct {
		Runs []*Run `json:"runs"`
	}
	call := httpc.Call{Method: http.MethodGet, Path: r.runPath(ref, "children"),
		Query: url.Values{"position": {strconv.Itoa(position)}}, Out: &l}
	if _, err := r.do(ctx, call); err != nil {
		return nil, err
	}
	return l.Runs, nil
}

// getApproval returns one approval request.
func (r *remote) getApproval(ctx context.Context, id string) (*ApprovalRecord, error) {
	var a ApprovalRecord
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.ns + "/approvals/" + url.PathEscape(id), Out: &a}); err != nil {
		return nil, err
	}
	return &a, nil
}

func (r *remote) history(ctx context.Context, ref string) ([]*Op, error) {
	h, err := r.exportHistory(ctx, ref)
	if err != nil {
		return nil, err
	}
	ops := make([]*Op, len(h.Ops))
	for i := range h.Ops {
		ops[i] = &h.Ops[i].Op
	}
	return ops, nil
}

// exportHistory reads a run and its history, in the export format.
func (r *remote) exportHistory(ctx context.Context, ref string) (*RecordedHistory, error) {
	var h RecordedHistory
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.runPath(ref, "history"), Out: &h}); err != nil {
		return nil, err
	}
	return &h, nil
}

// act posts an action on a run (cancel, resume) that answers the run.
func (r *remote) act(ctx context.Context, ref, action string) (*Run, error) {
	var run Run
	call := httpc.Call{Method: http.MethodPost, Path: r.runPath(ref, action), Body: struct{}{}, Out: &run}
	if _, err := r.do(ctx, call); err != nil {
		return nil, err
	}
	return &run, nil
}

func (r *remote) reset(ctx context.Context, ref, step string) (*Run, error) {
	var run Run
	body := struct {
		Step string `json:"step,omitempty"`
	}{step}
	call := httpc.Call{Method: http.MethodPost, Path: r.runPath(ref, "reset"), Body: body, Out: &run}
	if _, err := r.do(ctx, call); err != nil {
		return nil, err
	}
	return &run, nil
}

func (r *remote) value(ctx context.Context, ref, key string) (Payload, error) {
	var v struct {
		Value Payload `json:"value"`
	}
	call := httpc.Call{Method: http.MethodGet, Path: r.runPath(ref, "values", url.PathEscape(key)), Out: &v}
	if _, err := r.do(ctx, call); err != nil {
		return nil, err
	}
	return v.Value, nil
}

// wait long-polls the run's result until it has ended (200); each 202 answer
// (the server's wait was over) starts the next poll. A server whose MaxWait is
// shorter than the client's wait answers 400: the client halves its wait (down
// to a second) and remembers what the server took.
// waitAttempts caps the tries of one long poll of a run's result when the
// server cannot be reached or answers 503: backing off from 100 ms, doubling
// to 2 s, about 12 s in all, the time for a server to restart.
const waitAttempts = 10

func (r *remote) wait(ctx context.Context, ref string) (*Run, error) {
	for {
		wait := time.Duration(r.pollWait.Load())
		var run Run
		// A waiter rides out a server restart: more tries than a call's.
		call := httpc.Call{Method: http.MethodGet, Path: r.runPath(ref, "result"),
			Query: url.Values{"wait": {wait.String()}}, Out: &run, Wait: wait, Attempts: waitAttempts}
		status, err := r.do(ctx, call)
		switch {
		case r.shortenWait(wait, err):
			continue
		case err != nil:
			return nil, err
		case status == http.StatusOK && run.Status.Terminal():
			return &run, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// shortenWait reports whether err is a server's refusal of a long poll's
// wait (400: above its --max-wait) that a shorter wait may pass, and halves
// the client's wait then (down to a second), remembering what the server took.
func (r *remote) shortenWait(wait time.Duration, err error) bool {
	if !errors.Is(err, ErrInvalidParams) || wait <= time.Second {
		return false
	}
	r.pollWait.CompareAndSwap(int64(wait), int64(max(wait/2, time.Second)))
	return true
}

func (r *remote) sendEvent(ctx context.Context, ref, name string, payload []byte) error {
	if len(payload) > 0 && !json.Valid(payload) {
		return fmt.Errorf("sending event %q: %w: a server takes JSON payloads (Config.Codec must encode JSON)", name, ErrInvalidParams)
	}
	body := struct {
		Name    string          `json:"name"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}{name, payload}
	_, err := r.do(ctx, httpc.Call{Method: http.MethodPost, Path: r.runPath(ref, "events"), Body: body})
	return err
}

func (r *remote) approvals(ctx context.Context, f ApprovalFilter) (*ApprovalList, error) {
	q := url.Values{}
	if len(f.Statuses) > 0 {
		ss := make([]string, len(f.Statuses))
		for i, s := range f.Statuses {
			ss[i] = string(s)
		}
		q.Set("status", strings.Join(ss, ","))
	}
	setNonZero(q, "run", f.Run)
	setNonZero(q, "page_token", f.Cursor)
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var page ApprovalList
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.ns + "/approvals", Query: q, Out: &page}); err != nil {
		return nil, err
	}
	return &page, nil
}

// decide approves or rejects as the token's principal (the server takes no other).
func (r *remote) decide(ctx context.Context, id string, approve bool, comment string) (*ApprovalRecord, error) {
	verb := "reject"
	if approve {
		verb = "approve"
	}
	body := struct {
		Comment string `json:"comment,omitempty"`
	}{comment}
	var a ApprovalRecord
	call := httpc.Call{Method: http.MethodPost, Path: r.ns + "/approvals/" + url.PathEscape(id) + "/" + verb, Body: body, Out: &a}
	if _, err := r.do(ctx, call); err != nil {
		return nil, err
	}
	return &a, nil
}

func (r *remote) workers(ctx context.Context) ([]*WorkerRecord, error) {
	var l struct {
		Workers []*WorkerRecord `json:"workers"`
	}
	if _, err := r.do(ctx, httpc.Call{Method: http.MethodGet, Path: r.ns + "/workers", Out: &l}); err != nil {
		return nil, err
	}
	return l.Workers, nil
}
