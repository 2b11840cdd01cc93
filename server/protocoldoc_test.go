package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// The transcripts of docs/protocol/*.json (captured from a real `trellis
// server` by docs/protocol/capture.mjs, a worker in Node) are replayed here,
// request by request, against a server over HTTP with the Connect protocol's
// JSON, as a worker in another language sends them; each answer must match
// the recorded one in shape. IDs, lease tokens and secrets and event sequence
// numbers the server hands out differ from the recorded ones: the replay learns
// each from the answer that gives it and puts it in the later requests in place
// of the recorded one; times may differ. So the transcripts that
// docs/worker-protocol.md shows cannot drift from what the server does.

// protocolTranscript is one file of docs/protocol.
type protocolTranscript struct {
	Title     string             `json:"title"`
	Exchanges []protocolExchange `json:"exchanges"`
}

// protocolExchange is one call: "unary" and "server_stream" of the worker
// protocol, "http" of the HTTP API, and "sse" the read of a run's stream.
type protocolExchange struct {
	Note      string            `json:"note"`
	Kind      string            `json:"kind"`
	Procedure string            `json:"procedure"`
	Method    string            `json:"method"`
	Path      string            `json:"path"`
	Request   any               `json:"request"`
	Status    int               `json:"status"`
	Response  any               `json:"response"`
	Messages  []any             `json:"messages"`
	End       any               `json:"end"`
	Events    []protocolSSEvent `json:"events"`
}

type protocolSSEvent struct {
	ID    string `json:"id"`
	Event string `json:"event"`
	Data  any    `json:"data"`
}

// protocolBytesFields are the JSON names of the protocol's bytes fields (base64
// on the wire), which the replay decodes to compare or rewrite what they hold.
var protocolBytesFields = map[string]bool{"input": true, "output": true, "result": true, "payload": true,
	"data": true, "value": true, "details": true}

// protocolVolatile are the fields whose values the server chooses anew on each
// run: a different value is learnt, and replaces the recorded one in requests.
var protocolVolatile = map[string]bool{"id": true, "runId": true, "run_id": true, "workflowId": true, "workflow_id": true,
	"parentId": true, "parent_id": true, "leaseToken": true, "leaseSecret": true, "seq": true, "sequence": true}

var rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`)

// protocolReplay is the state of one transcript's replay.
type protocolReplay struct {
	t     *testing.T
	base  string
	token string
	subst map[string]string // recorded value -> this run's
}

func TestProtocolTranscripts(t *testing.T) {
	files, err := filepath.Glob("../docs/protocol/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("docs/protocol holds %d transcripts, want at least 6", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			var tr protocolTranscript
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if err := dec.Decode(&tr); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(tr.Exchanges) == 0 {
				t.Fatalf("%s: no exchanges", f)
			}
			r := &protocolReplay{t: t, base: protocolServer(t), token: "admin", subst: map[string]string{}}
			for i, ex := range tr.Exchanges {
				r.exchange(fmt.Sprintf("%s exchange %d (%s %s%s)", filepath.Base(f), i, ex.Kind, ex.Procedure, ex.Path), ex)
				if t.Failed() {
					return // later requests depend on this one
				}
			}
		})
	}
}

// protocolServer starts a server on a fresh SQLite store, with no worker of
// its own, and returns its URL.
func protocolServer(t *testing.T) string {
	st, err := trellis.OpenStore(context.Background(), storesqlite.URL(filepath.Join(t.TempDir(), "t.db")), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, Config{Backend: st, Listen: "127.0.0.1:0", Authenticator: testTokens(), MaxWait: 10 * time.Second})
	return "http://" + srv.Addr().String()
}

func (r *protocolReplay) exchange(where string, ex protocolExchange) {
	t := r.t
	req := r.rewrite("", ex.Request)
	switch ex.Kind {
	case "unary":
		status, body := r.post("/trellis.worker.v1.WorkerService/"+ex.Procedure, "application/json", protocolJSON(t, req))
		r.wantStatus(where, ex.Status, status, body)
		r.compare(where, "", ex.Response, protocolDecode(t, where, body))
	case "server_stream":
		var env bytes.Buffer
		msg := protocolJSON(t, req)
		env.WriteByte(0)
		_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
		env.Write(msg)
		status, body := r.post("/trellis.worker.v1.WorkerService/"+ex.Procedure, "application/connect+json", env.Bytes())
		r.wantStatus(where, ex.Status, status, body)
		var msgs []any
		var end any
		for len(body) >= 5 {
			flags, n := body[0], binary.BigEndian.Uint32(body[1:5])
			if int(n) > len(body)-5 {
				t.Fatalf("%s: truncated envelope", where)
			}
			m := protocolDecode(t, where, body[5:5+n])
			body = body[5+n:]
			if flags&2 != 0 {
				end = m
			} else {
				msgs = append(msgs, m)
			}
		}
		if len(msgs) != len(ex.Messages) {
			t.Fatalf("%s: %d messages, the transcript has %d: %v", where, len(msgs), len(ex.Messages), msgs)
		}
		for i := range msgs {
			r.compare(where, fmt.Sprintf("[%d]", i), ex.Messages[i], msgs[i])
		}
		r.compare(where, "end", ex.End, end)
	case "http":
		var body []byte
		if ex.Request != nil {
			body = protocolJSON(t, req)
		}
		status, resp := r.do(ex.Method, r.substitute(ex.Path), "application/json", body, nil)
		r.wantStatus(where, ex.Status, status, resp)
		if ex.Response != nil {
			r.compare(where, "", ex.Response, protocolDecode(t, where, resp))
		} else if len(bytes.TrimSpace(resp)) > 0 {
			t.Errorf("%s: an answer %s, the transcript has none", where, resp)
		}
	case "sse":
		status, resp := r.do("GET", r.substitute(ex.Path), "", nil, http.Header{"Accept": {"text/event-stream"}})
		r.wantStatus(where, ex.Status, status, resp)
		got := parseSSE(t, where, resp)
		if len(got) != len(ex.Events) {
			t.Fatalf("%s: %d events, the transcript has %d: %v", where, len(got), len(ex.Events), got)
		}
		for i, e := range ex.Events {
			if got[i].ID != e.ID || got[i].Event != e.Event {
				t.Errorf("%s: event %d is %s %s, the transcript has %s %s", where, i, got[i].ID, got[i].Event, e.ID, e.Event)
			}
			r.compare(where, fmt.Sprintf("events[%d].data", i), e.Data, got[i].Data)
		}
	default:
		t.Fatalf("%s: unknown kind %q", where, ex.Kind)
	}
}

func (r *protocolReplay) wantStatus(where string, want, got int, body []byte) {
	if want != got {
		r.t.Fatalf("%s: status %d (%s), the transcript has %d", where, got, body, want)
	}
}

func (r *protocolReplay) post(path, ctype string, body []byte) (int, []byte) {
	return r.do("POST", path, ctype, body, http.Header{"Connect-Protocol-Version": {"1"}})
}

func (r *protocolReplay) do(method, path, ctype string, body []byte, hdr http.Header) (int, []byte) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if ctype != "" && body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return res.StatusCode, b
}

// substitute puts this run's values in s in place of the recorded ones they
// replace (a child's ID holds its parent's, an approval's ID its run's).
func (r *protocolReplay) substitute(s string) string {
	if v, ok := r.subst[s]; ok {
		return v
	}
	for old, v := range r.subst {
		if len(old) >= 12 {
			s = strings.ReplaceAll(s, old, v)
		}
	}
	return s
}

// rewrite returns a recorded request with this run's values, inside bytes
// fields too (base64 of JSON).
func (r *protocolReplay) rewrite(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = r.rewrite(k, x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = r.rewrite(key, x)
		}
		return out
	case string:
		if protocolBytesFields[key] {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				return base64.StdEncoding.EncodeToString([]byte(r.substitute(string(b))))
			}
		}
		if len(v) < 12 && key != "consume" { // short values (1, 2, ...) stand for themselves but in consume
			return v
		}
		return r.substitute(v)
	}
	return v
}

// compare checks that got has the shape of want: the same fields, arrays of
// the same length, equal values but for times (any time matches a time) and
// volatile fields (learnt), bytes fields compared as what they decode to.
func (r *protocolReplay) compare(where, path string, want, got any) {
	t := r.t
	key := path
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		key = path[i+1:]
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: %s is %v, the transcript has an object", where, path, got)
			return
		}
		var wk, gk []string
		for k := range w {
			wk = append(wk, k)
		}
		for k := range g {
			gk = append(gk, k)
		}
		slices.Sort(wk)
		slices.Sort(gk)
		if !slices.Equal(wk, gk) {
			t.Errorf("%s: %s has fields %v, the transcript %v", where, path, gk, wk)
			return
		}
		for _, k := range wk {
			r.compare(where, join(path, k), w[k], g[k])
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			t.Errorf("%s: %s is %v, the transcript has %v", where, path, got, want)
			return
		}
		for i := range w {
			r.compare(where, fmt.Sprintf("%s[%d]", path, i), w[i], g[i])
		}
	case string:
		g, ok := got.(string)
		switch {
		case !ok:
			t.Errorf("%s: %s is %v, the transcript has %q", where, path, got, w)
		case protocolBytesFields[key]:
			wb, err1 := base64.StdEncoding.DecodeString(w)
			gb, err2 := base64.StdEncoding.DecodeString(g)
			var wv, gv any
			if err1 == nil && err2 == nil && jsonNumber(wb, &wv) == nil && jsonNumber(gb, &gv) == nil {
				r.compare(where, path+"(decoded)", wv, gv)
				return
			}
			r.compareString(where, path, key, w, g)
		default:
			r.compareString(where, path, key, w, g)
		}
	default: // numbers, booleans, null
		if fmt.Sprintf("%T %v", want, want) != fmt.Sprintf("%T %v", got, got) {
			t.Errorf("%s: %s is %v, the transcript has %v", where, path, got, want)
		}
	}
}

func (r *protocolReplay) compareString(where, path, key, want, got string) {
	key = strings.TrimSuffix(key, "(decoded)")
	switch {
	case want == got, r.substitute(want) == got:
	case rfc3339.MatchString(want) && rfc3339.MatchString(got):
	case protocolVolatile[key]:
		r.subst[want] = got
	default:
		// A text that embeds times (a wait reason) matches with any times.
		if re := rfc3339In.ReplaceAllString(r.substitute(want), "T"); re == rfc3339In.ReplaceAllString(got, "T") && re != want {
			return
		}
		r.t.Errorf("%s: %s is %q, the transcript has %q", where, path, got, want)
	}
}

var rfc3339In = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func jsonNumber(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func protocolDecode(t *testing.T, where string, b []byte) any {
	t.Helper()
	var v any
	if err := jsonNumber(b, &v); err != nil {
		t.Fatalf("%s: answer %q: %v", where, b, err)
	}
	return v
}

func protocolJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseSSE reads the events of a text/event-stream answer.
func parseSSE(t *testing.T, where string, b []byte) []protocolSSEvent {
	var out []protocolSSEvent
	var cur protocolSSEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "id":
			cur.ID = v
		case "event":
			cur.Event = v
		case "data":
			cur.Data = protocolDecode(t, where, []byte(v))
		case "":
			if cur.Event != "" {
				out = append(out, cur)
			}
			cur = protocolSSEvent{}
		}
	}
	if cur.Event != "" {
		out = append(out, cur)
	}
	return out
}

// docs/worker-protocol.md links every transcript, and its table of lifecycle
// events names each event of store.StreamLifecycle.
func TestProtocolDocLinksTranscripts(t *testing.T) {
	b, err := os.ReadFile("../docs/worker-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	files, err := filepath.Glob("../docs/protocol/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if link := "(protocol/" + filepath.Base(f) + ")"; !strings.Contains(doc, link) {
			t.Errorf("docs/worker-protocol.md does not link %s", link)
		}
	}
	_, table, ok := strings.Cut(doc, "**Lifecycle stream events**")
	table, _, ok2 := strings.Cut(table, "### What the server checks")
	if !ok || !ok2 {
		t.Fatal("docs/worker-protocol.md: no table of lifecycle stream events")
	}
	for _, name := range store.StreamLifecycle() {
		if !strings.Contains(table, "`"+name+"`") {
			t.Errorf("docs/worker-protocol.md: the lifecycle table does not name %s", name)
		}
	}
}
