package server

import (
	"net/url"
	"testing"

	"github.com/trellis-dev/trellis"
)

// The API drives runs end to end, on SQLite and Postgres: start, get, result with
// a long poll, history, values, lists with filters and pages, workers.
func TestAPIRunLifecycle(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			run := e.start("echo", map[string]any{"n": 1}, map[string]any{"id": "order-1"})
			if run.Workflow != "echo" || run.WorkflowID != "order-1" || run.Queue != "default" {
				t.Fatalf("started %+v", run)
			}
			var got trellis.Run
			e.do("GET", "/v1/namespaces/default/runs/order-1", "reader", nil).want(t, 200).decode(t, &got)
			if got.ID != run.ID {
				t.Fatalf("by workflow ID: %s, want %s", got.ID, run.ID)
			}
			done := e.waitRun(run.ID)
			if done.Status != trellis.StatusSucceeded || string(done.Output) != `{"n":1}` {
				t.Fatalf("result %s %s", done.Status, done.Output)
			}
			// The history is the export document, which ParseHistory reads.
			hr := e.do("GET", "/v1/namespaces/default/runs/order-1/history", "reader", nil).want(t, 200)
			h, err := trellis.ParseHistory(hr.body)
			if err != nil {
				t.Fatalf("history route's answer is not a %s document: %v\n%s", trellis.HistoryFormat, err, hr.body)
			}
			if h.Run.ID != run.ID || h.Run.Status != trellis.StatusSucceeded || len(h.Ops) != 1 || h.Ops[0].Kind != trellis.OpSet {
				t.Fatalf("history: run %s %s, ops %+v", h.Run.ID, h.Run.Status, h.Ops)
			}
			var v Value
			e.do("GET", "/v1/namespaces/default/runs/order-1/values/seen", "reader", nil).want(t, 200).decode(t, &v)
			if string(v.Value) != `{"n":1}` {
				t.Fatalf("value %s", v.Value)
			}
			e.do("GET", "/v1/namespaces/default/runs/order-1/values/nope", "reader", nil).problem(t, 404, "key_not_found")
			e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "echo", "id": "order-1", "reuse": "reject"}).
				problem(t, 409, "run_exists")
			e.do("POST", "/v1/namespaces/default/runs/order-1/cancel", "producer", nil).problem(t, 409, "run_finished")
			testLists(t, e, run)
		})
	}
}

func testLists(t *testing.T, e *env, first *trellis.Run) {
	second := e.start("nobody-serves", nil, map[string]any{"queue": "q1"})
	list := func(q string) *trellis.RunPage {
		var p trellis.RunPage
		e.do("GET", "/v1/namespaces/default/runs?"+q, "reader", nil).want(t, 200).decode(t, &p)
		return &p
	}
	for q, want := range map[string][]string{
		"":                                    {second.ID, first.ID},
		"queue=q1":                            {second.ID},
		"workflow=echo":                       {first.ID},
		"status=succeeded":                    {first.ID},
		"status=pending,succeeded":            {second.ID, first.ID},
		"created_before=2000-01-01T00:00:00Z": nil,
	} {
		p := list(q)
		if len(p.Runs) != len(want) {
			t.Fatalf("list %q: %d runs, want %d", q, len(p.Runs), len(want))
		}
		for i, r := range p.Runs {
			if r.ID != want[i] {
				t.Fatalf("list %q: run %d is %s, want %s", q, i, r.ID, want[i])
			}
		}
	}
	p1 := list("limit=1")
	if len(p1.Runs) != 1 || p1.NextCursor == "" {
		t.Fatalf("first page %+v", p1)
	}
	p2 := list("limit=1&page_token=" + url.QueryEscape(p1.NextCursor))
	if len(p2.Runs) != 1 || p2.Runs[0].ID != first.ID || p2.NextCursor != "" {
		t.Fatalf("second page %+v", p2)
	}
	var wfs WorkflowList
	e.do("GET", "/v1/namespaces/default/workflows", "reader", nil).want(t, 200).decode(t, &wfs)
	if len(wfs.Workflows) != 4 {
		t.Fatalf("workflows %v", wfs.Workflows)
	}
	var ws WorkerList
	e.do("GET", "/v1/namespaces/default/workers", "reader", nil).want(t, 200).decode(t, &ws)
	if len(ws.Workers) != 1 || !ws.Workers[0].Live {
		t.Fatalf("workers %+v", ws.Workers)
	}
}

// Events wake a waiting run; a long poll answers 202 while it waits.
func TestAPIEvents(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	run := e.start("await-go", nil, nil)
	r := e.do("GET", "/v1/namespaces/default/runs/"+run.ID+"/result?wait=10ms", "reader", nil).want(t, 202)
	var waiting trellis.Run
	r.decode(t, &waiting)
	if waiting.Status.Terminal() {
		t.Fatalf("run ended early: %+v", waiting)
	}
	e.do("POST", "/v1/namespaces/default/runs/"+run.ID+"/events", "producer", map[string]any{"name": "go", "payload": "hi"}).want(t, 204)
	if done := e.waitRun(run.ID); string(done.Output) != `"hi"` {
		t.Fatalf("output %s", done.Output)
	}
	e.do("POST", "/v1/namespaces/default/runs/"+run.ID+"/events", "producer", map[string]any{"name": "go"}).problem(t, 409, "run_finished")
}

// Decisions are the token principal's: a request naming approvers may be decided
// only by them, and the body cannot name a principal.
func TestAPIApprovals(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			run := e.start("needs-alice", nil, nil)
			id := e.pendingApproval(run.ID)
			path := "/v1/namespaces/default/approvals/" + id
			e.do("POST", path+"/approve", "approver", map[string]any{"comment": "me"}).problem(t, 403, "permission_denied")
			e.do("POST", path+"/approve", "reader", nil).problem(t, 403, "permission_denied")
			e.do("POST", path+"/approve", "alice", map[string]any{"comment": "ok", "principal": "mallory"}).problem(t, 400, "invalid_argument")
			var a trellis.ApprovalRecord
			e.do("POST", path+"/approve", "alice", map[string]any{"comment": "ok"}).want(t, 200).decode(t, &a)
			if a.Status != trellis.ApprovalApproved || a.Principal != "alice" || a.Comment != "ok" {
				t.Fatalf("decision %+v", a)
			}
			e.do("POST", path+"/reject", "alice", nil).problem(t, 409, "approval_decided")
			if done := e.waitRun(run.ID); string(done.Output) != "true" {
				t.Fatalf("output %s", done.Output)
			}
			open := e.start("needs-anyone", nil, nil)
			e.do("POST", "/v1/namespaces/default/approvals/"+e.pendingApproval(open.ID)+"/reject", "approver", nil).want(t, 200)
			if done := e.waitRun(open.ID); string(done.Output) != `"approver"` {
				t.Fatalf("rejected run: %s %s", done.Status, done.Output)
			}
		})
	}
}

// pendingApproval waits for run's pending approval request and returns its ID.
func (e *env) pendingApproval(runID string) string {
	var list trellis.ApprovalList
	e.until(runID, func() bool {
		e.do("GET", "/v1/namespaces/default/approvals?status=pending&run="+runID, "reader", nil).want(e.t, 200).decode(e.t, &list)
		return len(list.Approvals) == 1
	})
	return list.Approvals[0].ID
}
