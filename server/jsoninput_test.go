package server

import (
	"context"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// Payloads and the bodies around them are valid UTF-8 JSON with each name once
// per object, or refused 400 with where and what, and nothing changes: a start's
// input, a batch's, an event's payload, a schedule's input, and every envelope.
func TestInvalidJSONIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	waiting := e.start("await-go", nil, map[string]any{"id": "waiting"})
	done := e.waitRun(e.start("echo", map[string]any{"n": 1}, nil).ID)
	before := e.runCount()
	runs := "/v1/namespaces/default/runs"
	spec := `{"workflow":"echo","cron":"0 3 * * *","input":%s}`
	for _, c := range []struct {
		name, method, path, body, says string
	}{
		{"raw invalid UTF-8 in an input", "POST", runs, "{\"workflow\":\"echo\",\"input\":{\"name\":\"Ad\xff\"}}", `invalid UTF-8 at "/input/name"`},
		{"a lone surrogate in an input", "POST", runs, `{"workflow":"echo","input":"\ud800"}`, "surrogate"},
		{"a UTF-8-encoded surrogate", "POST", runs, "{\"workflow\":\"echo\",\"input\":\"\xed\xa0\x80\"}", "invalid UTF-8"},
		{"a duplicate name in the envelope", "POST", runs, `{"workflow":"echo","workflow":"await-go"}`, `duplicate object member name "workflow"`},
		{"a duplicate name deep in an input", "POST", runs, `{"workflow":"echo","input":{"a":[{"b":1,"b":2}]}}`, `"b" in the object at "/input/a/0"`},
		{"an escaped duplicate name", "POST", runs, `{"workflow":"echo","input":{"id":1,"\u0069d":2}}`, "duplicate"},
		{"invalid UTF-8 in a workflow name", "POST", runs, "{\"workflow\":\"ech\xf0\"}", "invalid UTF-8"},
		{"invalid UTF-8 in a batch item", "POST", runs + ":batch", "{\"runs\":[{\"workflow\":\"echo\"},{\"workflow\":\"echo\",\"input\":[\"\xc3\"]}]}", `"/runs/1/input/0"`},
		{"a duplicate list in a batch", "POST", runs + ":batch", `{"runs":[{"workflow":"echo"}],"runs":[]}`, "duplicate"},
		{"invalid UTF-8 in an event payload", "POST", runs + "/waiting/events", "{\"name\":\"go\",\"payload\":\"\xff\"}", "invalid UTF-8"},
		{"a duplicate name in an event payload", "POST", runs + "/waiting/events", `{"name":"go","payload":{"x":1,"x":1}}`, "duplicate"},
		{"a duplicate event name", "POST", runs + "/waiting/events", `{"name":"stop","name":"go","payload":"hi"}`, "duplicate"},
		{"invalid UTF-8 in a reset's step", "POST", runs + "/" + done.ID + "/reset", "{\"step\":\"\xff\"}", "invalid UTF-8"},
		{"a cancel body with a duplicate", "POST", runs + "/waiting/cancel", `{"a":1,"a":1}`, "duplicate"},
		{"invalid UTF-8 in a schedule's input", "POST", "/v1/namespaces/default/schedules", `{"name":"s","spec":` + strings.Replace(spec, "%s", "\"\xff\"", 1) + `}`, `at "/spec/input"`},
		{"a duplicate name in a schedule's input", "PUT", "/v1/namespaces/default/schedules/s", strings.Replace(spec, "%s", `{"k":1,"k":2}`, 1), `"k" in the object at "/input"`},
		{"a duplicate namespace name", "POST", "/v1/namespaces", `{"name":"a","name":"b"}`, "duplicate"},
		{"a duplicate queue name", "POST", "/v1/namespaces/default/queues", `{"name":"a","name":"b"}`, "duplicate"},
		{"a duplicate token name", "POST", "/v1/tokens", `{"name":"a","grants":[{"role":"reader","namespace":"*"}],"name":"b"}`, "duplicate"},
		{"a duplicate grant field", "POST", "/v1/tokens", `{"name":"a","grants":[{"role":"reader","role":"admin","namespace":"*"}]}`, "duplicate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := e.do(c.method, c.path, "admin", c.body).problem(t, 400, "invalid_argument")
			if !strings.Contains(p.Detail, c.says) {
				t.Fatalf("detail %q does not say %q", p.Detail, c.says)
			}
		})
	}
	if n := e.runCount(); n != before {
		t.Fatalf("%d runs after refused requests, want %d", n, before)
	}
	if run, err := e.worker.Get(context.Background(), waiting.ID); err != nil || run.Status.Terminal() || run.CancelRequested {
		t.Fatalf("the waiting run after refused events and cancel: %+v, %v", run, err)
	}
	var scheds ScheduleList
	e.do("GET", "/v1/namespaces/default/schedules", "reader", nil).want(t, 200).decode(t, &scheds)
	tokens, err := e.st.TokenList(context.Background())
	if len(scheds.Schedules) != 0 || err != nil || len(tokens) != 0 {
		t.Fatalf("after refused requests: schedules %v, tokens %v (%v)", scheds.Schedules, tokens, err)
	}
	if _, err := e.st.NamespaceGet(context.Background(), &store.NamespaceGetParams{Name: "a"}); err == nil {
		t.Fatal("a namespace was created by a refused request")
	}
	// The same run started with valid JSON goes through: the check refuses
	// only what it should.
	var run trellis.Run
	e.do("POST", runs, "producer", `{"workflow":"echo","input":{"name":"Adé 😀 \u00e9","a":{"a":1}}}`).want(t, 201).decode(t, &run)
	if got := e.waitRun(run.ID); string(got.Output) != `{"a":{"a":1},"name":"Adé 😀 é"}` {
		t.Fatalf("output %s", got.Output)
	}
}

// Every route that takes a body checks it: the walk sends each mutating route
// a body with a duplicate name and one with invalid UTF-8, as an admin, and each
// is refused 400 before anything else is done.
func TestEveryBodyIsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	run := e.start("needs-anyone", nil, nil)
	approval := e.pendingApproval(run.ID)
	walked := 0
	for _, rt := range routeTable {
		if rt.public || rt.method == "GET" || rt.method == "DELETE" {
			continue
		}
		path := strings.NewReplacer("{ns}", "default", "{key}", "k", "{name}", "nobody", "{queue}", "default").Replace(rt.pattern)
		if strings.Contains(rt.pattern, "/approvals/{id}") {
			path = strings.Replace(path, "{id}", approval, 1)
		}
		path = strings.Replace(path, "{id}", run.ID, 1)
		for body, says := range map[string]string{`{"a":1,"a":1}`: "duplicate", "{\"a\":\"\xff\"}": "invalid UTF-8"} {
			walked++
			p := e.do(rt.method, path, "admin", body).problem(t, 400, "invalid_argument")
			if !strings.Contains(p.Detail, "malformed JSON body: "+says) {
				t.Errorf("%s %s with %q: detail %q, want it to say %q", rt.method, rt.pattern, body, p.Detail, says)
			}
		}
	}
	if walked < 2*20 {
		t.Fatalf("walked %d requests: fewer mutating routes than expected", walked)
	}
}
