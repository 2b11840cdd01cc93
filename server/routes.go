package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// scope says which queue a route's role is checked on (see authorize).
type scope int

const (
	scopeNone      scope = iota // public route: no principal
	scopeNamespace              // the namespace as a whole (queue "")
	scopeListQueue              // the `queue` query parameter, else the namespace as a whole
	scopeBodyQueue              // the queue the request body names (checked by the handler)
	scopeRun                    // the queue of the run {id} names
	// scopeRunLazy is scopeRun for a handler that reads the run itself: when the
	// principal's grant covers the whole namespace, the middleware does not read
	// the run (call.run stays nil); otherwise it reads it as scopeRun does.
	scopeRunLazy
	// scopeRunsQuery: the queue of each run the `runs` query parameter
	// names (checked by the handler; none read when the grant covers the
	// whole namespace).
	scopeRunsQuery
	scopeApproval // the queue of the run of approval {id}
	scopeGlobal   // no namespace: the role must be granted on every namespace ("*")
)

// param is a query parameter of a route.
type param struct {
	name, typ, doc string
}

// route is one entry of the route table: the mux, the authorization rule and the
// OpenAPI document are all built from it, so they cannot drift.
type route struct {
	method, pattern string
	op, summary     string
	public          bool      // no token needed
	role            auth.Role // the role the principal needs (every non-public route has one)
	scope           scope
	query           []param
	request         any  // a zero value of the request body type, or nil
	status          int  // the status of success
	response        any  // a zero value of the response type (nil: no body)
	stream          bool // answers text/event-stream: not counted in MaxInFlight but in MaxStreams
	// ndjson: answers application/x-ndjson, one response value per line,
	// written as they come (a long poll, counted in MaxInFlight).
	ndjson bool
	// keyInStore: the handler checks only its request before its store call,
	// which looks its idempotency key up first thing in its transaction, so a
	// request with a key skips the lookup before the handler (a read per call);
	// a duplicate is found by the store and answered the recorded response.
	keyInStore bool
	// unkeyed says why a mutating route ignores an Idempotency-Key header;
	// every other non-GET route honours it (takesKey), and
	// TestIdempotencyWalk proves it does.
	unkeyed string
	// audit is how the route's requests are audited (audit.go): every
	// mutating route is (TestEveryChangeIsAudited), no read is.
	audit  auditRule
	handle func(s *Server, w http.ResponseWriter, r *http.Request, c *call) error
}

// takesKey reports whether the route honours an Idempotency-Key header (see
// handle): every mutating route of the API but those that say why not.
func (rt *route) takesKey() bool {
	return rt.method != http.MethodGet && !rt.public && rt.unkeyed == ""
}

// tokensUnkeyed is why the token routes ignore an Idempotency-Key header.
const tokensUnkeyed = "the token routes address no namespace to keep keys in, and a kept response would " +
	"store a new token's secret, which the store keeps only hashed; a retried create fails token_exists, " +
	"a retried revoke changes nothing, and a retried rotate leaves the secret before it its grace " +
	"(store.TokenStore.TokenRotate)"

// Response bodies that are not SDK records.
type (
	// RunList is a page of runs.
	RunList = trellis.RunPage
	// History is a run and its ops in the history export format
	// (docs/history-format.md), as `trellis runs history --json` writes it.
	History = trellis.RecordedHistory
	// WorkflowList names the workflows live workers serve.
	WorkflowList struct {
		Workflows []string `json:"workflows"`
	}
	// WorkerList lists a namespace's workers.
	WorkerList struct {
		Workers []*trellis.WorkerRecord `json:"workers"`
	}
	// Value is one value of a run's store.
	Value struct {
		Key   string          `json:"key"`
		Value trellis.Payload `json:"value"`
	}
	// ScheduleList lists a namespace's schedules.
	ScheduleList struct {
		Schedules []*trellis.Schedule `json:"schedules"`
	}
	// ChildList lists the child runs one op of a run started, in item order.
	ChildList struct {
		Runs []*trellis.Run `json:"runs"`
	}
	// TokenList lists every token of the store, live and revoked (never a secret).
	TokenList struct {
		Tokens []*store.Token `json:"tokens"`
	}
	// CreatedToken is a new token and its secret, shown in this answer only.
	CreatedToken struct {
		Token  *store.Token `json:"token"`
		Secret string       `json:"secret"`
	}
	// Health answers /healthz and /readyz.
	Health struct {
		Status string `json:"status"`
	}
)

var (
	pageParams = []param{
		{"limit", "integer", "page size, 1 to 1000 (default 100)"},
		{"page_token", "string", "next_page_token of the previous page"},
	}
	runListParams = append([]param{
		{"status", "string", "comma-separated run states"},
		{"workflow", "string", "workflow name"},
		{"workflow_id", "string", "workflow ID: the runs that had it (a reset's runs share it)"},
		{"queue", "string", "queue name"},
		{"created_after", "string", "RFC 3339 time, inclusive"},
		{"created_before", "string", "RFC 3339 time, exclusive"},
	}, pageParams...)
	approvalListParams = append([]param{
		{"status", "string", "comma-separated approval states"},
		{"run", "string", "run ID"},
	}, pageParams...)
	childParams = []param{{"position", "integer", "the position of the child op in the parent's history (required)"}}
	waitParams  = []param{{"wait", "string", `long poll: how long to wait for the run to end, e.g. "30s"`}}
	// waitRunsParams are GET runs:wait's (waitruns.go).
	waitRunsParams = []param{
		{"runs", "string", "the run IDs to wait for, separated by commas: 1 to 100 (required)"},
		{"wait", "string", `how long to wait for them to end, e.g. "30s" (the server's --max-wait at most, and by default)`},
	}
	streamParams = []param{{"after", "string", `replay the events after this sequence, or "now": only new events (the Last-Event-ID header wins)`}}
)

const (
	nsRuns      = "/v1/namespaces/{ns}/runs"
	nsQueues    = "/v1/namespaces/{ns}/queues"
	nsSchedules = "/v1/namespaces/{ns}/schedules"
)

// routeTable is every route of the server.
var routeTable = []route{
	{method: "GET", pattern: "/healthz", op: "healthz", summary: "The process is up", public: true,
		status: 200, response: Health{}, handle: (*Server).healthz},
	{method: "GET", pattern: "/readyz", op: "readyz", summary: "The store answers and its schema is current", public: true,
		status: 200, response: Health{}, handle: (*Server).readyz},
	{method: "GET", pattern: "/metrics", op: "metrics", summary: "Prometheus metrics of the API, the server's clients and its store (text format)",
		role: auth.RoleReader, scope: scopeGlobal, status: 200, handle: (*Server).metrics},
	{method: "GET", pattern: "/v1/openapi.json", op: "openapi", summary: "This document", public: true,
		status: 200, handle: (*Server).openapi},
	{method: "POST", pattern: nsRuns, op: "startRun", summary: "Start a run by workflow name; durable before the response",
		role: auth.RoleProducer, scope: scopeBodyQueue, request: StartRequest{}, status: 201, response: trellis.Run{}, handle: (*Server).startRun, audit: auditRule{"run.start", targetRun},
		keyInStore: true},
	{method: "POST", pattern: nsRuns + ":batch", op: "startRuns", summary: "Start up to 1,000 runs in one transaction, each with its own outcome",
		role: auth.RoleProducer, scope: scopeBodyQueue, request: StartManyRequest{}, status: 200, response: trellis.StartManyResponse{}, handle: (*Server).startMany, audit: auditRule{"run.start", targetRuns}},
	{method: "GET", pattern: nsRuns, op: "listRuns", summary: "List runs, newest first",
		role: auth.RoleReader, scope: scopeListQueue, query: runListParams, status: 200, response: RunList{}, handle: (*Server).listRuns},
	{method: "GET", pattern: nsRuns + "/{id}", op: "getRun", summary: "One run, by run ID or workflow ID",
		role: auth.RoleReader, scope: scopeRun, status: 200, response: trellis.Run{}, handle: (*Server).getRun},
	{method: "DELETE", pattern: nsRuns + "/{id}", op: "deleteRun", summary: "Delete a finished run and everything that belongs to it, now",
		role: auth.RoleAdmin, scope: scopeRun, status: 204, handle: (*Server).deleteRun, audit: auditRule{"run.delete", targetRun}},
	{method: "GET", pattern: nsRuns + "/{id}/history", op: "getHistory", summary: "A run's ops, attempts and decisions",
		role: auth.RoleReader, scope: scopeRun, status: 200, response: History{}, handle: (*Server).getHistory},
	{method: "GET", pattern: nsRuns + "/{id}/result", op: "getResult", summary: "The run; with wait, once it ends (200) or when the wait is over (202)",
		role: auth.RoleReader, scope: scopeRunLazy, query: waitParams, status: 200, response: trellis.Run{}, handle: (*Server).getResult},
	{method: "GET", pattern: nsRuns + ":wait", op: "waitRuns", summary: "Wait for up to 100 runs at once: a JSON line for each as it ends, and a last line when all have or the wait is over",
		role: auth.RoleReader, scope: scopeRunsQuery, query: waitRunsParams, status: 200, response: WaitLine{}, ndjson: true, handle: (*Server).waitRuns},
	{method: "GET", pattern: nsRuns + "/{id}/stream", op: "streamRun", summary: "The run's events as text/event-stream (SSE), from a cursor, live until its final event",
		role: auth.RoleReader, scope: scopeRun, query: streamParams, status: 200, stream: true, handle: (*Server).streamRun},
	{method: "POST", pattern: nsRuns + "/{id}/cancel", op: "cancelRun", summary: "Cancel a run",
		role: auth.RoleProducer, scope: scopeRun, status: 200, response: trellis.Run{}, handle: (*Server).cancelRun, audit: auditRule{"run.cancel", targetRun}},
	{method: "POST", pattern: nsRuns + "/{id}/resume", op: "resumeRun", summary: "Make a blocked run pending again",
		role: auth.RoleProducer, scope: scopeRun, status: 200, response: trellis.Run{}, handle: (*Server).resumeRun, audit: auditRule{"run.resume", targetRun}},
	{method: "POST", pattern: nsRuns + "/{id}/reset", op: "resetRun", summary: "Start a finished run again from a step; returns the new run",
		role: auth.RoleProducer, scope: scopeRun, request: ResetRequest{}, status: 201, response: trellis.Run{}, handle: (*Server).resetRun, audit: auditRule{"run.reset", targetRun}},
	{method: "POST", pattern: nsRuns + "/{id}/events", op: "sendEvent", summary: "Send an event to a run",
		role: auth.RoleProducer, scope: scopeRun, request: EventRequest{}, status: 204, handle: (*Server).sendEvent, audit: auditRule{"run.event", targetRun}},
	{method: "GET", pattern: nsRuns + "/{id}/children", op: "listChildren", summary: "The child runs one op of a run started, in item order",
		role: auth.RoleReader, scope: scopeRun, query: childParams, status: 200, response: ChildList{}, handle: (*Server).listChildren},
	{method: "GET", pattern: nsRuns + "/{id}/values/{key}", op: "getValue", summary: "A value of the run's store",
		role: auth.RoleReader, scope: scopeRun, status: 200, response: Value{}, handle: (*Server).getValue},
	{method: "GET", pattern: "/v1/namespaces/{ns}/approvals", op: "listApprovals", summary: "List approval requests, newest first",
		role: auth.RoleReader, scope: scopeNamespace, query: approvalListParams, status: 200, response: trellis.ApprovalList{}, handle: (*Server).listApprovals},
	{method: "GET", pattern: "/v1/namespaces/{ns}/approvals/{id}", op: "getApproval", summary: "One approval request",
		role: auth.RoleReader, scope: scopeApproval, status: 200, response: trellis.ApprovalRecord{}, handle: (*Server).getApproval},
	{method: "POST", pattern: "/v1/namespaces/{ns}/approvals/{id}/approve", op: "approve", summary: "Approve a pending request as the token's principal",
		role: auth.RoleApprover, scope: scopeApproval, request: DecideRequest{}, status: 200, response: trellis.ApprovalRecord{}, handle: (*Server).approve, audit: auditRule{"approval.approve", targetApproval}},
	{method: "POST", pattern: "/v1/namespaces/{ns}/approvals/{id}/reject", op: "reject", summary: "Reject a pending request as the token's principal",
		role: auth.RoleApprover, scope: scopeApproval, request: DecideRequest{}, status: 200, response: trellis.ApprovalRecord{}, handle: (*Server).reject, audit: auditRule{"approval.reject", targetApproval}},
	{method: "GET", pattern: "/v1/namespaces/{ns}/workflows", op: "listWorkflows", summary: "The workflows that live workers serve",
		role: auth.RoleReader, scope: scopeNamespace, status: 200, response: WorkflowList{}, handle: (*Server).listWorkflows},
	{method: "GET", pattern: "/v1/namespaces/{ns}/workers", op: "listWorkers", summary: "The namespace's workers, live or not",
		role: auth.RoleReader, scope: scopeNamespace, status: 200, response: WorkerList{}, handle: (*Server).listWorkers},
	// The audit log (audit.go): an admin of every namespace reads all of it,
	// an admin of a namespace (as a whole) that namespace's entries.
	{method: "GET", pattern: "/v1/audit", op: "listAudit", summary: "The audit log: who changed what, when and from where, newest first",
		role: auth.RoleAdmin, scope: scopeGlobal, query: auditParams, status: 200, response: AuditList{}, handle: (*Server).listAudit},
	{method: "GET", pattern: "/v1/namespaces/{ns}/audit", op: "listNamespaceAudit", summary: "The namespace's audit log, newest first",
		role: auth.RoleAdmin, scope: scopeNamespace, query: namespaceAuditParams, status: 200, response: AuditList{}, handle: (*Server).listNamespaceAudit},
	{method: "POST", pattern: "/v1/namespaces", op: "createNamespace", summary: "Create a namespace's record (retention, default queue, payload limit)",
		role: auth.RoleAdmin, scope: scopeGlobal, request: NamespaceRequest{}, status: 201, response: store.Namespace{}, handle: (*Server).createNamespace, audit: auditRule{"namespace.create", targetNamespace},
		keyInStore: true}, // its key is kept in the namespace the body names (createNamespace)
	{method: "GET", pattern: "/v1/namespaces", op: "listNamespaces", summary: "The namespaces with a record, by name",
		role: auth.RoleReader, scope: scopeGlobal, status: 200, response: NamespaceList{}, handle: (*Server).listNamespaces},
	{method: "GET", pattern: "/v1/namespaces/{ns}", op: "getNamespace", summary: "A namespace's record",
		role: auth.RoleReader, scope: scopeNamespace, status: 200, response: store.Namespace{}, handle: (*Server).getNamespace},
	{method: "PATCH", pattern: "/v1/namespaces/{ns}", op: "updateNamespace", summary: "Change the fields of a namespace's record the body holds",
		role: auth.RoleAdmin, scope: scopeNamespace, request: NamespaceUpdateRequest{}, status: 200, response: store.Namespace{}, handle: (*Server).updateNamespace, audit: auditRule{"namespace.update", targetNamespace}},
	{method: "POST", pattern: nsQueues, op: "createQueue", summary: "Create a queue's record: paused or not, limits, defaults",
		role: auth.RoleAdmin, scope: scopeNamespace, request: QueueRequest{}, status: 201, response: store.Queue{}, handle: (*Server).createQueue, audit: auditRule{"queue.create", targetQueue}},
	{method: "GET", pattern: nsQueues, op: "listQueues", summary: "The namespace's queues with a record, by name",
		role: auth.RoleReader, scope: scopeNamespace, status: 200, response: QueueList{}, handle: (*Server).listQueues},
	{method: "GET", pattern: nsQueues + "/{queue}", op: "getQueue", summary: "A queue's record",
		role: auth.RoleReader, scope: scopeNamespace, status: 200, response: store.Queue{}, handle: (*Server).getQueue},
	{method: "PATCH", pattern: nsQueues + "/{queue}", op: "updateQueue", summary: "Change the settings of a queue the body holds",
		role: auth.RoleAdmin, scope: scopeNamespace, request: QueueUpdateRequest{}, status: 200, response: store.Queue{}, handle: (*Server).updateQueue, audit: auditRule{"queue.update", targetQueue}},
	{method: "POST", pattern: nsQueues + "/{queue}/pause", op: "pauseQueue", summary: "Pause a queue: its runs wait, the running ones finish (409 queue_state when paused)",
		role: auth.RoleAdmin, scope: scopeNamespace, status: 200, response: store.Queue{}, handle: (*Server).pauseQueue, audit: auditRule{"queue.pause", targetQueue}},
	{method: "POST", pattern: nsQueues + "/{queue}/resume", op: "resumeQueue", summary: "Resume a paused queue (409 queue_state when not paused)",
		role: auth.RoleAdmin, scope: scopeNamespace, status: 200, response: store.Queue{}, handle: (*Server).resumeQueue, audit: auditRule{"queue.resume", targetQueue}},
	// Schedules (docs/schedules.md): reading needs reader; trigger (one run now)
	// producer; the rest manages standing configuration and needs admin. All on
	// the namespace as a whole: a queue-restricted grant manages no schedule.
	{method: "GET", pattern: nsSchedules, op: "listSchedules", summary: "List the namespace's schedules by name",
		role: auth.RoleReader, scope: scopeNamespace, status: 200, response: ScheduleList{}, handle: (*Server).listSchedules},
	{method: "POST", pattern: nsSchedules, op: "createSchedule", summary: "Create a schedule: a workflow started on a cron expression in a time zone",
		role: auth.RoleAdmin, scope: scopeNamespace, request: CreateScheduleRequest{}, status: 201, response: trellis.Schedule{}, handle: (*Server).createSchedule, audit: auditRule{"schedule.create", targetSchedule}},
	{method: "GET", pattern: nsSchedules + "/{name}", op: "getSchedule", summary: "One schedule",
		role: auth.RoleReader, scope: scopeNamespace, status: 200, response: trellis.Schedule{}, handle: (*Server).getSchedule},
	{method: "PUT", pattern: nsSchedules + "/{name}", op: "updateSchedule", summary: "Replace a schedule's spec; it fires from now on",
		role: auth.RoleAdmin, scope: scopeNamespace, request: trellis.ScheduleSpec{}, status: 200, response: trellis.Schedule{}, handle: (*Server).updateSchedule, audit: auditRule{"schedule.update", targetSchedule}},
	{method: "DELETE", pattern: nsSchedules + "/{name}", op: "deleteSchedule", summary: "Delete a schedule (its runs stay)",
		role: auth.RoleAdmin, scope: scopeNamespace, status: 204, handle: (*Server).deleteSchedule, audit: auditRule{"schedule.delete", targetSchedule}},
	{method: "POST", pattern: nsSchedules + "/{name}/pause", op: "pauseSchedule", summary: "Pause a schedule",
		role: auth.RoleAdmin, scope: scopeNamespace, status: 200, response: trellis.Schedule{}, handle: (*Server).pauseSchedule, audit: auditRule{"schedule.pause", targetSchedule}},
	{method: "POST", pattern: nsSchedules + "/{name}/resume", op: "resumeSchedule", summary: "Resume a paused schedule (missed ticks are not caught up)",
		role: auth.RoleAdmin, scope: scopeNamespace, status: 200, response: trellis.Schedule{}, handle: (*Server).resumeSchedule, audit: auditRule{"schedule.resume", targetSchedule}},
	{method: "POST", pattern: nsSchedules + "/{name}/trigger", op: "triggerSchedule", summary: "Start one run of a schedule now",
		role: auth.RoleProducer, scope: scopeNamespace, status: 201, response: trellis.Run{}, handle: (*Server).triggerSchedule, audit: auditRule{"schedule.trigger", targetSchedule}},
	{method: "POST", pattern: nsSchedules + "/{name}/backfill", op: "backfillSchedule", summary: "Start the runs of a schedule's ticks in [start, end)",
		role: auth.RoleAdmin, scope: scopeNamespace, request: BackfillRequest{}, status: 200, response: trellis.BackfillResult{}, handle: (*Server).backfillSchedule, audit: auditRule{"schedule.backfill", targetSchedule}},
	{method: "POST", pattern: "/v1/tokens", op: "createToken", summary: "Create a token; the answer holds its secret, shown this once",
		role: auth.RoleAdmin, scope: scopeGlobal, request: TokenRequest{}, status: 201, response: CreatedToken{}, handle: (*Server).createToken, audit: auditRule{"token.create", targetToken},
		unkeyed: tokensUnkeyed},
	{method: "GET", pattern: "/v1/tokens", op: "listTokens", summary: "List every token, live and revoked, by name (never a secret)",
		role: auth.RoleAdmin, scope: scopeGlobal, status: 200, response: TokenList{}, handle: (*Server).listTokens},
	{method: "POST", pattern: "/v1/tokens/{name}/revoke", op: "revokeToken", summary: "Revoke a token by name, at once and for ever",
		role: auth.RoleAdmin, scope: scopeGlobal, status: 200, response: store.Token{}, handle: (*Server).revokeToken, audit: auditRule{"token.revoke", targetToken},
		unkeyed: tokensUnkeyed},
	{method: "POST", pattern: "/v1/tokens/{name}/rotate", op: "rotateToken", summary: "Give a token a new secret, shown this once; the old one works for the grace (default 1h)",
		role: auth.RoleAdmin, scope: scopeGlobal, request: RotateTokenRequest{}, status: 200, response: CreatedToken{}, handle: (*Server).rotateToken,
		audit: auditRule{"token.rotate", targetToken}, unkeyed: tokensUnkeyed},
}

// routes builds the server's handler from the route table.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.table {
		mux.Handle(rt.method+" "+rt.pattern, s.api.route(rt.op, s.cfg.TracerProvider).observe(s.wrap(rt)))
	}
	for _, rt := range uiRouteTable {
		mux.Handle(rt.method+" "+rt.pattern, s.wrapUI(rt))
	}
	workerPath, worker := s.workerHandler()
	s.workerPath = workerPath
	mux.Handle(workerPath, worker)
	// The ServeMux redirects a subtree's root without its slash to it (301,
	// text/html): that path names no procedure.
	mux.Handle(strings.TrimSuffix(workerPath, "/"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, ErrNotFound)
	}))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, s.unrouted(mux, r))
	}))
	s.mux = mux
	return s.protect(s.guard(mux))
}

// unrouted tells a path no route has from a method the path does not take.
func (s *Server) unrouted(mux *http.ServeMux, r *http.Request) error {
	var allow []string
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, p := mux.Handler(r2); p != "/" && p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, r.URL.EscapedPath())
	}
	return &notAllowed{method: r.Method, allow: allow}
}
