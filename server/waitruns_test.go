package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// waitLines opens GET runs:wait and returns a function that reads its next
// line (nil at the end of the answer).
func (e *env) waitLines(query, token string) (next func() *WaitLine, status int, contentType string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), "GET", e.base+"/v1/namespaces/default/runs:wait?"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { res.Body.Close() })
	rd := bufio.NewReader(res.Body)
	return func() *WaitLine {
		e.t.Helper()
		b, err := rd.ReadBytes('\n')
		if len(b) == 0 && err != nil {
			return nil
		}
		var l WaitLine
		if err := json.Unmarshal(b, &l); err != nil {
			e.t.Fatalf("line %q: %v", b, err)
		}
		return &l
	}, res.StatusCode, res.Header.Get("Content-Type")
}

// TestWaitRuns waits for several runs in one request: each line comes as its
// run ends (the ended and the missing first), and the last says done.
func TestWaitRuns(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			a, b := e.start("await-go", nil, nil), e.start("await-go", nil, map[string]any{"queue": "q1"})
			c := e.start("echo", map[string]any{"x": 1}, nil)
			e.waitRun(c.ID)

			next, status, ct := e.waitLines("runs="+a.ID+","+b.ID+","+c.ID+",nope&wait=10s", "reader")
			if status != 200 || ct != "application/x-ndjson" {
				t.Fatalf("status %d, Content-Type %q", status, ct)
			}
			var early []string
			for range 2 {
				l := next()
				switch {
				case l == nil:
					t.Fatal("the answer ended early")
				case l.Run != nil:
					early = append(early, l.Run.ID+" "+string(l.Run.Status)+" "+string(l.Run.Output))
				default:
					early = append(early, "missing "+l.Missing)
				}
			}
			slices.Sort(early)
			if want := []string{c.ID + ` succeeded {"x":1}`, "missing nope"}; !slices.Equal(early, want) {
				t.Fatalf("first lines %q, want %q", early, want)
			}
			for _, r := range []*trellis.Run{b, a} {
				e.do("POST", "/v1/namespaces/default/runs/"+r.ID+"/events", "producer", map[string]any{"name": "go", "payload": "hi " + r.ID}).want(t, 204)
				l := next()
				if l == nil || l.Run == nil || l.Run.ID != r.ID || l.Run.Status != trellis.StatusSucceeded || string(l.Run.Output) != `"hi `+r.ID+`"` {
					t.Fatalf("after the event to %s: line %+v", r.ID, l)
				}
			}
			if l := next(); l == nil || !l.Done || len(l.Waiting) != 0 {
				t.Fatalf("last line %+v, want done", l)
			}
			if l := next(); l != nil {
				t.Fatalf("a line after the last: %+v", l)
			}

			// The wait over first: the last line lists the runs not ended.
			d := e.start("await-go", nil, map[string]any{"queue": "q1"})
			t0 := time.Now()
			_, status, _ = e.waitLines("runs="+d.ID+","+a.ID+"&wait=200ms", "q1-reader")
			if status != 403 {
				t.Fatalf("a reader of queue q1 waiting for a run of the default queue: status %d, want 403", status)
			}
			next, status, _ = e.waitLines("runs="+d.ID+"&wait=200ms", "q1-reader")
			if l := next(); status != 200 || l == nil || !l.Done || !slices.Equal(l.Waiting, []string{d.ID}) {
				t.Fatalf("status %d, line %+v, want done waiting for %s", status, l, d.ID)
			}
			if waited := time.Since(t0); waited < 200*time.Millisecond || waited > 5*time.Second {
				t.Fatalf("the wait took %s", waited)
			}
		})
	}
}

// TestWaitRunsBadInput: a malformed request is refused before any line, and
// waits for nothing.
func TestWaitRunsBadInput(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	const path = "/v1/namespaces/default/runs:wait"
	ids := make([]string, maxWaitRuns+1)
	for i := range ids {
		ids[i] = "r" + strings.Repeat("x", 2) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	for _, tc := range []struct {
		name, query, token string
		status             int
		code               string
	}{
		{"no runs", "", "reader", 400, "invalid_argument"},
		{"empty runs", "?runs=", "reader", 400, "invalid_argument"},
		{"an empty ID", "?runs=a,,b", "reader", 400, "invalid_argument"},
		{"an ID twice", "?runs=a,b,a", "reader", 400, "invalid_argument"},
		{"too many", "?runs=" + strings.Join(ids, ","), "reader", 400, "invalid_argument"},
		{"a control character", "?runs=a%01b", "reader", 400, "invalid_argument"},
		{"bad wait", "?runs=a&wait=forever", "reader", 400, "invalid_argument"},
		{"wait over the cap", "?runs=a&wait=1h", "reader", 400, "invalid_argument"},
		{"unknown parameter", "?runs=a&limit=3", "reader", 400, "invalid_argument"},
		{"runs twice", "?runs=a&runs=b", "reader", 400, "invalid_argument"},
		{"no token", "?runs=a", "", 401, "unauthenticated"},
		{"another namespace's reader", "?runs=a", "other-reader", 403, "permission_denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.do("GET", path+tc.query, tc.token, nil).problem(t, tc.status, tc.code)
		})
	}
}
