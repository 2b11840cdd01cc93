package trellis_test

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
)

// callLog records the client calls an interceptor saw.
type callLog struct {
	mu    sync.Mutex
	calls []trellis.ClientCall
}

func (l *callLog) interceptor() trellis.Interceptor {
	return trellis.Interceptor{Call: func(ctx context.Context, c *trellis.ClientCall, next func(context.Context) error) error {
		l.mu.Lock()
		l.calls = append(l.calls, *c)
		l.mu.Unlock()
		return next(ctx)
	}}
}

// take returns the calls seen since the last take.
func (l *callLog) take() []trellis.ClientCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.calls
	l.calls = nil
	return out
}

// clientCall is one public Client method called as a test of interception,
// and the call the interceptors must see for it.
type clientCall struct {
	want trellis.ClientCall
	call func(ctx context.Context, c *trellis.Client) error
}

// clientCallExceptions are the exported Client methods that make no call of
// the store or server on the caller's behalf, and are not intercepted.
var clientCallExceptions = map[string]string{
	"Close": "stops the client's own worker and closes its store: no call about runs or records",
	"StartQueue": "answers which queue a start would use, from its options, the registration or the " +
		"namespace's record the client caches (a server asks it before each start it authorizes); " +
		"the start itself is intercepted",
}

// interceptedRef is the workflow ID of the run clientCalls' StartRaw starts: the methods
// about a run find it.
const interceptedRef = "wid"

// clientCalls calls every exported Client method that performs a call. A
// method missing here fails TestEveryClientMethodIsIntercepted: wrap it in
// c.call, then add it.
func clientCalls() map[string]clientCall {
	leaf := trellis.NewWorkflow("intercepted-child", func(wc *trellis.Context, in int) (int, error) { return in, nil })
	// A child op: ExportHistory reads its children.
	wf := trellis.NewWorkflow("intercepted", func(wc *trellis.Context, in int) (int, error) { return trellis.Child(wc, leaf, in) })
	spec := trellis.ScheduleSpec{Workflow: "intercepted", Cron: "@hourly"}
	noErr := func(_ any, err error) error { return err }
	call := func(m, wfName, interceptedRef string, f func(ctx context.Context, c *trellis.Client) error) clientCall {
		return clientCall{want: trellis.ClientCall{Method: m, Workflow: wfName, Ref: interceptedRef}, call: f}
	}
	return map[string]clientCall{
		"Register": call("Register", "", "", func(ctx context.Context, c *trellis.Client) error { return c.Register(ctx, wf, leaf) }),
		"StartRaw": call("Start", "intercepted", interceptedRef, func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.StartRaw(ctx, "intercepted", []byte("1"), trellis.StartOptions{ID: interceptedRef}))
		}),
		"StartMany": call("StartMany", "", "", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.StartMany(ctx, []trellis.StartRequest{{Workflow: "intercepted", Input: []byte("2")}}))
		}),
		"Get":  call("Get", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return noErr(c.Get(ctx, interceptedRef)) }),
		"List": call("List", "", "", func(ctx context.Context, c *trellis.Client) error { return noErr(c.List(ctx, trellis.ListOptions{})) }),
		"Wait": call("Wait", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.Wait(ctx, interceptedRef))
		}),
		"History":  call("History", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return noErr(c.History(ctx, interceptedRef)) }),
		"Children": call("Children", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return noErr(c.Children(ctx, interceptedRef, 0)) }),
		"Value": call("Value", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error {
			var v any
			return c.Value(ctx, interceptedRef, "k", &v)
		}),
		"Cancel":    call("Cancel", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return c.Cancel(ctx, interceptedRef) }),
		"Resume":    call("Resume", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return c.Resume(ctx, interceptedRef) }),
		"Reset":     call("Reset", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return noErr(c.Reset(ctx, interceptedRef, "s")) }),
		"Delete":    call("Delete", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return c.Delete(ctx, interceptedRef) }),
		"SendEvent": call("SendEvent", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error { return c.SendEvent(ctx, interceptedRef, "e", 1) }),
		"Stream": call("Stream", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error {
			for _, err := range c.Stream(ctx, interceptedRef, 0) {
				return err
			}
			return nil
		}),
		"ExportHistory": call("ExportHistory", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.ExportHistory(ctx, interceptedRef))
		}),
		"Approvals": call("Approvals", "", interceptedRef, func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.Approvals(ctx, trellis.ApprovalFilter{Run: interceptedRef}))
		}),
		"GetApproval": call("GetApproval", "", "ap", func(ctx context.Context, c *trellis.Client) error { return noErr(c.GetApproval(ctx, "ap")) }),
		"Approve": call("Approve", "", "ap", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.Approve(ctx, "ap", "me", ""))
		}),
		"Reject": call("Reject", "", "ap", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.Reject(ctx, "ap", "me", ""))
		}),
		"Workers":         call("Workers", "", "", func(ctx context.Context, c *trellis.Client) error { return noErr(c.Workers(ctx)) }),
		"ServedWorkflows": call("ServedWorkflows", "", "", func(ctx context.Context, c *trellis.Client) error { return noErr(c.ServedWorkflows(ctx)) }),
		"CreateNamespace": call("CreateNamespace", "", "ns1", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.CreateNamespace(ctx, trellis.NamespaceOptions{Name: "ns1"}))
		}),
		"GetNamespace":   call("GetNamespace", "", "ns1", func(ctx context.Context, c *trellis.Client) error { return noErr(c.GetNamespace(ctx, "ns1")) }),
		"ListNamespaces": call("ListNamespaces", "", "", func(ctx context.Context, c *trellis.Client) error { return noErr(c.ListNamespaces(ctx)) }),
		"UpdateNamespace": call("UpdateNamespace", "", "ns1", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.UpdateNamespace(ctx, trellis.NamespaceUpdate{Name: "ns1"}))
		}),
		"CreateQueue": call("CreateQueue", "", "q1", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.CreateQueue(ctx, "q1", trellis.QueueSettings{}))
		}),
		"GetQueue":   call("GetQueue", "", "q1", func(ctx context.Context, c *trellis.Client) error { return noErr(c.GetQueue(ctx, "q1")) }),
		"ListQueues": call("ListQueues", "", "", func(ctx context.Context, c *trellis.Client) error { return noErr(c.ListQueues(ctx)) }),
		"UpdateQueue": call("UpdateQueue", "", "q1", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.UpdateQueue(ctx, "q1", trellis.QueueSettings{}))
		}),
		"PauseQueue":  call("PauseQueue", "", "q1", func(ctx context.Context, c *trellis.Client) error { return noErr(c.PauseQueue(ctx, "q1")) }),
		"ResumeQueue": call("ResumeQueue", "", "q1", func(ctx context.Context, c *trellis.Client) error { return noErr(c.ResumeQueue(ctx, "q1")) }),
		"CreateSchedule": call("CreateSchedule", "intercepted", "s1", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.CreateSchedule(ctx, "s1", spec))
		}),
		"GetSchedule":   call("GetSchedule", "", "s1", func(ctx context.Context, c *trellis.Client) error { return noErr(c.GetSchedule(ctx, "s1")) }),
		"ListSchedules": call("ListSchedules", "", "", func(ctx context.Context, c *trellis.Client) error { return noErr(c.ListSchedules(ctx)) }),
		"UpdateSchedule": call("UpdateSchedule", "intercepted", "s1", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.UpdateSchedule(ctx, "s1", spec))
		}),
		"PauseSchedule":  call("PauseSchedule", "", "s1", func(ctx context.Context, c *trellis.Client) error { return noErr(c.PauseSchedule(ctx, "s1")) }),
		"ResumeSchedule": call("ResumeSchedule", "", "s1", func(ctx context.Context, c *trellis.Client) error { return noErr(c.ResumeSchedule(ctx, "s1")) }),
		"TriggerSchedule": call("TriggerSchedule", "", "s1", func(ctx context.Context, c *trellis.Client) error {
			return noErr(c.TriggerSchedule(ctx, "s1"))
		}),
		"BackfillSchedule": call("BackfillSchedule", "", "s1", func(ctx context.Context, c *trellis.Client) error {
			end := time.Now()
			return noErr(c.BackfillSchedule(ctx, "s1", end.Add(-2*time.Hour), end))
		}),
		"DeleteSchedule": call("DeleteSchedule", "", "s1", func(ctx context.Context, c *trellis.Client) error { return c.DeleteSchedule(ctx, "s1") }),
	}
}

// Every exported Client method that performs a call runs inside the call
// interceptors, exactly once, with its name, workflow and interceptedRef, in a client of
// its own store and in a client of a server alike; the methods that do not are
// listed with a reason.
func TestEveryClientMethodIsIntercepted(t *testing.T) {
	t.Parallel()
	calls := clientCalls()
	typ := reflect.TypeFor[*trellis.Client]()
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if _, ok := calls[name]; !ok && clientCallExceptions[name] == "" {
			t.Errorf("Client.%s is neither called by clientCalls nor an exception: wrap it in the call interceptors (c.call) and add it", name)
		}
	}
	for name := range calls {
		if _, ok := typ.MethodByName(name); !ok {
			t.Errorf("clientCalls calls Client.%s, which does not exist", name)
		}
	}
	url := sqliteURL(t)
	s := newWorkerServer(t, url)
	admin := s.token(t, "admin", auth.Grant{Role: auth.RoleAdmin, Namespace: "*"})
	for _, kind := range []string{"embedded", "remote"} {
		t.Run(kind, func(t *testing.T) {
			c, log := loggedClient(t, s, kind, admin, nil)
			names := make([]string, 0, len(calls))
			for name := range calls {
				names = append(names, name)
			}
			slices.Sort(names)
			// Register first: the schedules need a workflow served; then a
			// run for the methods about a run to find, deleted last.
			first, last := []string{"Register", "StartRaw"}, []string{"Cancel", "Delete"}
			names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(first, n) || slices.Contains(last, n) })
			for _, name := range slices.Concat(first, names, last) {
				cc := calls[name]
				// Errors are fine (the run is pending without a worker in the
				// remote case, so Wait and Stream time out): the call was made.
				ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
				_ = cc.call(ctx, c)
				cancel()
				got := log.take()
				if len(got) != 1 || got[0] != cc.want {
					t.Errorf("Client.%s: interceptors saw %+v, want [%+v]", name, got, cc.want)
				}
				if name == "StartRaw" && kind == "embedded" { // let the run and its child finish
					run := must[*trellis.Run](t)(c.Get(ctxT(t), interceptedRef))
					must[*trellis.Run](t)(c.Wait(ctxT(t), run.ID))
					log.take()
				}
			}
		})
	}
}

// loggedClient opens a client whose call interceptor logs its calls: on s's
// store ("embedded"), or through s with token ("remote"); mod, when set,
// changes the configuration first. The client closes at the test's end.
func loggedClient(t *testing.T, s *workerServer, kind, token string, mod func(*trellis.Config)) (*trellis.Client, *callLog) {
	t.Helper()
	log := &callLog{}
	cfg := trellis.Config{Backend: s.st, Interceptors: []trellis.Interceptor{log.interceptor()}}
	if kind == "remote" {
		cfg = trellis.Config{Server: s.base, Token: token, Interceptors: cfg.Interceptors}
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := trellis.Open(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, log
}

// Handle.Result, a wait for the run a Start made, goes through the call
// interceptors as method "Result" with the run ID, embedded and through a
// server (where it is a long poll of the run's result).
func TestHandleResultIsIntercepted(t *testing.T) {
	t.Parallel()
	s := newWorkerServer(t, sqliteURL(t))
	admin := s.token(t, "admin", auth.Grant{Role: auth.RoleAdmin, Namespace: "*"})
	wf := trellis.NewWorkflow("result-intercepted", func(wc *trellis.Context, i int) (int, error) { return i + 1, nil })
	for _, kind := range []string{"embedded", "remote"} {
		t.Run(kind, func(t *testing.T) {
			c, log := loggedClient(t, s, kind, admin, func(cfg *trellis.Config) {
				if kind == "remote" { // a worker of its own serves wf
					cfg.Worker.Disabled = true
					wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
					startRemoteWorker(t, s.base, wtok, wf)
				}
			})
			if kind == "embedded" {
				if err := c.Register(ctxT(t), wf); err != nil { // its worker serves wf
					t.Fatal(err)
				}
			}
			h, err := trellis.Start(ctxT(t), c, wf, 41)
			if err != nil {
				t.Fatal(err)
			}
			log.take()
			got, err := h.Result(ctxT(t))
			if err != nil || got != 42 {
				t.Fatalf("Result = %d, %v", got, err)
			}
			want := trellis.ClientCall{Method: "Result", Ref: h.RunID()}
			if calls := log.take(); len(calls) != 1 || calls[0] != want {
				t.Fatalf("interceptors saw %+v, want [%+v]", calls, want)
			}
			// A failing wait is seen too, with its error.
			ctx, cancel := context.WithCancel(ctxT(t))
			cancel()
			if _, err := h.Result(ctx); err == nil {
				t.Fatal("Result with a cancelled context succeeded")
			}
			if calls := log.take(); len(calls) != 1 || calls[0] != want {
				t.Fatalf("interceptors saw %+v for a cancelled Result, want [%+v]", calls, want)
			}
		})
	}
}
