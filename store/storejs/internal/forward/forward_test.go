package forward_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
)

func TestCallRoundTrip(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	serve(t, ns, "fwd.rt", echo)
	w := &waits{}
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.rt", Wait: w.wait}

	n := int64(-42)
	in := payload{Name: "run-1", At: time.Date(2031, 2, 3, 4, 5, 6, 789, time.UTC),
		Data: []byte{0, 1, 255}, Count: &n, Tags: map[string]string{"a": "b"}}
	var out *payload
	if err := c.Call(context.Background(), "echo", &in, &out); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if !reflect.DeepEqual(out, &in) {
		t.Fatalf("result = %+v, want %+v", out, &in)
	}
	if got := w.got(); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("waited for %v, want [7]", got)
	}
}

// storeSentinels are the store's sentinel errors by name;
// TestEverySentinelIsListed keeps the list whole.
var storeSentinels = map[string]error{
	"ErrRunNotFound": store.ErrRunNotFound, "ErrRunExists": store.ErrRunExists,
	"ErrRunFinished": store.ErrRunFinished, "ErrRunActive": store.ErrRunActive,
	"ErrRunNotBlocked": store.ErrRunNotBlocked, "ErrLeaseLost": store.ErrLeaseLost,
	"ErrKeyNotFound": store.ErrKeyNotFound, "ErrInvalidParams": store.ErrInvalidParams,
	"ErrConflict": store.ErrConflict, "ErrApprovalNotFound": store.ErrApprovalNotFound,
	"ErrApprovalDecided": store.ErrApprovalDecided, "ErrClosed": store.ErrClosed,
	"ErrNoStore": store.ErrNoStore, "ErrWorkerOwned": store.ErrWorkerOwned,
	"ErrStorageFull": store.ErrStorageFull, "ErrTokenExists": store.ErrTokenExists,
	"ErrTokenNotFound": store.ErrTokenNotFound, "ErrTokenInactive": store.ErrTokenInactive,
	"ErrIdempotencyKeyNotFound": store.ErrIdempotencyKeyNotFound,
	"ErrIdempotencyKeyUsed":     store.ErrIdempotencyKeyUsed,
	"ErrIdempotencyKeyConflict": store.ErrIdempotencyKeyConflict,
	"ErrNamespaceNotFound":      store.ErrNamespaceNotFound, "ErrNamespaceExists": store.ErrNamespaceExists,
	"ErrQueueNotFound": store.ErrQueueNotFound, "ErrQueueExists": store.ErrQueueExists,
	"ErrQueueState": store.ErrQueueState, "ErrScheduleNotFound": store.ErrScheduleNotFound,
	"ErrScheduleExists": store.ErrScheduleExists, "ErrSchedulePaused": store.ErrSchedulePaused,
	"ErrScheduleNotPaused": store.ErrScheduleNotPaused, "ErrNotLeader": store.ErrNotLeader,
}

// TestEverySentinelIsListed reads package store's sources: every exported
// variable named Err* must be in storeSentinels, so that a new sentinel fails
// here until the wire knows it.
func TestEverySentinelIsListed(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("store sources: %v (%d files)", err, len(files))
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	for _, n := range names {
		if _, ok := storeSentinels[n]; !ok {
			t.Errorf("store.%s is not in storeSentinels (and maybe not on the wire)", n)
		}
	}
	if len(names) != len(storeSentinels) {
		t.Errorf("store has %d sentinels, storeSentinels %d", len(names), len(storeSentinels))
	}
}

// TestErrorsRoundTrip: every store sentinel, wrapped with more text by the
// leader, arrives as an error that errors.Is matches, with the leader's
// message; so do the context's errors and this package's own; an unknown
// error keeps its text and matches none.
func TestErrorsRoundTrip(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	all := map[string]error{"context.Canceled": context.Canceled,
		"context.DeadlineExceeded": context.DeadlineExceeded, "forward.ErrUnknownMethod": forward.ErrUnknownMethod}
	for name, err := range storeSentinels {
		all["store."+name] = err
	}
	serve(t, ns, "fwd.err", func(_ context.Context, method string, _ json.RawMessage) (any, uint64, error) {
		if err, ok := all[method]; ok {
			return nil, 0, fmt.Errorf("doing %s: %w", method, err)
		}
		return nil, 0, errors.New("disk on fire")
	})
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.err"}
	ctx := context.Background()
	for name, sentinel := range all {
		err := c.Call(ctx, name, nil, nil)
		if !errors.Is(err, sentinel) {
			t.Errorf("%s: got %v, not errors.Is the sentinel", name, err)
			continue
		}
		if want := fmt.Sprintf("doing %s: %v", name, sentinel); err.Error() != want {
			t.Errorf("%s: message %q, want %q", name, err.Error(), want)
		}
		for other, s := range all {
			if s != sentinel && errors.Is(err, s) && !errors.Is(sentinel, s) {
				t.Errorf("%s: also matches %s", name, other)
			}
		}
		// The leader's store write may commit after its context ended.
		ctxErr := sentinel == context.Canceled || sentinel == context.DeadlineExceeded
		if errors.Is(err, forward.ErrOutcomeUnknown) != ctxErr {
			t.Errorf("%s: errors.Is(ErrOutcomeUnknown) = %v, want %v", name, !ctxErr, ctxErr)
		}
	}
	err := c.Call(ctx, "other", nil, nil)
	var fe *forward.Error
	if !errors.As(err, &fe) || err.Error() != "disk on fire" || len(fe.Unwrap()) != 0 {
		t.Fatalf("unknown error = %#v, want its text and no sentinel", err)
	}
}

// TestUnknownMethod: a method the leader does not know comes back as
// ErrUnknownMethod, with the leader's text naming it.
func TestUnknownMethod(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	serve(t, ns, "fwd.m", echo)
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.m"}
	err := c.Call(context.Background(), "RunDestroy", nil, nil)
	if !errors.Is(err, forward.ErrUnknownMethod) {
		t.Fatalf("err = %v, want ErrUnknownMethod", err)
	}
}

// TestNoLeaderRetriesThenSucceeds: a call made while nobody serves the
// subject retries until a leader appears, then succeeds once.
func TestNoLeaderRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.late"}
	before := inMsgs(t, ns)
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		var out *payload
		err := c.Call(context.Background(), "echo", &payload{Name: "x"}, &out)
		if err == nil && out.Name != "x" {
			err = fmt.Errorf("result %+v", out)
		}
		done <- err
	}()
	eventually(t, "two unanswered attempts", func() bool { return inMsgs(t, ns)-before >= 2 })
	serve(t, ns, "fwd.late", func(ctx context.Context, m string, p json.RawMessage) (any, uint64, error) {
		calls.Add(1)
		return echo(ctx, m, p)
	})
	if err := <-done; err != nil {
		t.Fatalf("Call: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// TestNoLeaderGivesUp: with nobody serving, or only servers that are not the
// leader, a call fails with ErrNoLeader after NoLeaderWait (or when its
// context ends) and not with a store sentinel.
func TestNoLeaderGivesUp(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	var refused atomic.Int32
	serve(t, ns, "fwd.follower", func(context.Context, string, json.RawMessage) (any, uint64, error) {
		refused.Add(1)
		return nil, 0, fmt.Errorf("server b: %w", forward.ErrNotLeader)
	})
	nc := connect(t, ns)
	for _, subject := range []string{"fwd.nobody", "fwd.follower"} {
		c := &forward.Client{NC: nc, Subject: subject, NoLeaderWait: 150 * time.Millisecond}
		start := time.Now()
		err := c.Call(context.Background(), "echo", nil, nil)
		if !errors.Is(err, forward.ErrNoLeader) || errors.Is(err, store.ErrClosed) {
			t.Fatalf("%s: err = %v, want ErrNoLeader", subject, err)
		}
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Fatalf("%s: gave up after %v, before NoLeaderWait", subject, d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = (&forward.Client{NC: nc, Subject: subject}).Call(ctx, "echo", nil, nil)
		cancel()
		// The context ends between attempts (ErrNoLeader), or while one is in
		// flight: then the client cannot know that nobody took it.
		if !(errors.Is(err, forward.ErrNoLeader) || errors.Is(err, forward.ErrOutcomeUnknown)) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: err = %v, want ErrNoLeader (or ErrOutcomeUnknown) and the context's error", subject, err)
		}
	}
	if refused.Load() < 2 {
		t.Fatalf("the follower refused %d requests: the client did not retry", refused.Load())
	}
}

// TestTimeoutIsUnknownOutcome: a request the leader took but did not answer
// in time fails with ErrOutcomeUnknown (and the deadline), and the leader's
// handler saw the caller's deadline.
func TestTimeoutIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	sawDeadline := make(chan bool, 1)
	serve(t, ns, "fwd.slow", func(ctx context.Context, _ string, _ json.RawMessage) (any, uint64, error) {
		_, ok := ctx.Deadline()
		sawDeadline <- ok
		<-ctx.Done()
		return nil, 0, ctx.Err()
	})
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.slow", Timeout: 100 * time.Millisecond}
	err := c.Call(context.Background(), "write", nil, nil)
	if !errors.Is(err, forward.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrOutcomeUnknown wrapping the deadline", err)
	}
	if !<-sawDeadline {
		t.Fatal("the handler's context had no deadline")
	}
}

// TestStopWaitsForInFlight: stop returns only after the requests in flight
// finished, and their callers get their answers; a request after stop is
// refused as not_leader and goes to the next leader.
func TestStopWaitsForInFlight(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	const n = 5
	started, release := make(chan struct{}, n), make(chan struct{})
	stop := serve(t, ns, "fwd.stop", func(ctx context.Context, m string, p json.RawMessage) (any, uint64, error) {
		started <- struct{}{}
		<-release
		return echo(ctx, m, p)
	})
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.stop"}
	results := make(chan error, n)
	for i := range n {
		go func() {
			var out *payload
			err := c.Call(context.Background(), "echo", &payload{Name: fmt.Sprint(i)}, &out)
			if err == nil && out.Name != fmt.Sprint(i) {
				err = fmt.Errorf("call %d got %+v", i, out)
			}
			results <- err
		}()
	}
	for range n {
		<-started
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stop returned with requests in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-stopped
	for range n {
		if err := <-results; err != nil {
			t.Fatalf("in-flight call: %v", err)
		}
	}
	stop() // idempotent

	// After stop, a call retries until the next leader serves the subject.
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), "echo", &payload{}, nil) }()
	serve(t, ns, "fwd.stop", echo)
	if err := <-done; err != nil {
		t.Fatalf("call after stop: %v", err)
	}
}

// TestBadArguments: Serve and Call refuse what they cannot use, clearly.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns)
	for name, call := range map[string]func() error{
		"no conn":    func() error { _, err := forward.Serve(nil, "s", echo); return err },
		"no subject": func() error { _, err := forward.Serve(nc, "", echo); return err },
		"no handler": func() error { _, err := forward.Serve(nc, "s", nil); return err },
		"bad subject": func() error {
			_, err := forward.Serve(nc, "a b", echo)
			return err
		},
		"client without subject": func() error {
			return (&forward.Client{NC: nc}).Call(context.Background(), "echo", nil, nil)
		},
		"params that cannot travel": func() error {
			return (&forward.Client{NC: nc, Subject: "s"}).Call(context.Background(), "echo", struct{ F func() }{func() {}}, nil)
		},
	} {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestLeaderChangeEndsAWriteInFlight: a request the old leader took and
// never answers (it died with it) fails with ErrOutcomeUnknown ChangeGrace
// after a new leader begins, not after the request's timeout; one answered
// within the grace gets its answer; a new leader that begins after the
// answer changes nothing.
func TestLeaderChangeEndsAWriteInFlight(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	took := make(chan struct{}, 4)
	answer, dead := make(chan struct{}), make(chan struct{})
	serve(t, ns, "fwd.dead", func(ctx context.Context, method string, _ json.RawMessage) (any, uint64, error) {
		took <- struct{}{}
		if method == "slow" {
			select {
			case <-answer:
				return "late", 0, nil
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
		select { // the dead leader: never answers
		case <-ctx.Done():
		case <-dead:
		}
		return nil, 0, errors.New("dead")
	})
	t.Cleanup(func() { close(dead) }) // before serve's stop, which waits for the handlers
	var mu sync.Mutex
	changed := make(chan struct{})
	change := func() {
		mu.Lock()
		defer mu.Unlock()
		close(changed)
		changed = make(chan struct{})
	}
	// A grace long beside the 50ms the second call's answer takes, so that a
	// loaded machine (CI, -race) still answers within it.
	const grace = time.Second
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.dead", Timeout: 30 * time.Second, ChangeGrace: grace,
		LeaderChanged: func() <-chan struct{} {
			mu.Lock()
			defer mu.Unlock()
			return changed
		}}

	// Unanswered: given up after the grace.
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), "write", nil, nil) }()
	<-took
	changedAt := time.Now()
	change()
	select {
	case err := <-errc:
		if !errors.Is(err, forward.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "new leader") {
			t.Fatalf("err = %v, want ErrOutcomeUnknown saying a new leader began", err)
		}
		if d := time.Since(changedAt); d < grace {
			t.Fatalf("given up %s after the change, before the grace of %s", d, grace)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call went on 10s after a new leader began")
	}

	// Answered within the grace: the answer.
	var out string
	go func() { errc <- c.Call(context.Background(), "slow", nil, &out) }()
	<-took
	change()
	time.Sleep(50 * time.Millisecond)
	close(answer)
	if err := <-errc; err != nil || out != "late" {
		t.Fatalf("answered within the grace: %q, %v; want \"late\"", out, err)
	}
}
