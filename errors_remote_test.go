package trellis_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/problem"
	"github.com/trellis-dev/trellis/server"
)

// servedSentinels are the SDK's errors that a server answers: each has one
// problem code, and a client on a server gets the same value back.
var servedSentinels = map[string]error{
	"ErrRunNotFound": trellis.ErrRunNotFound, "ErrRunExists": trellis.ErrRunExists,
	"ErrRunFinished": trellis.ErrRunFinished, "ErrRunActive": trellis.ErrRunActive,
	"ErrRunNotBlocked": trellis.ErrRunNotBlocked, "ErrKeyNotFound": trellis.ErrKeyNotFound,
	"ErrInvalidParams": trellis.ErrInvalidParams, "ErrApprovalNotFound": trellis.ErrApprovalNotFound,
	"ErrApprovalDecided": trellis.ErrApprovalDecided, "ErrUnknownWorkflow": trellis.ErrUnknownWorkflow,
	"ErrInvalidInput": trellis.ErrInvalidInput, "ErrPayloadTooLarge": trellis.ErrPayloadTooLarge,
	"ErrStorageFull": trellis.ErrStorageFull, "ErrNamespaceNotFound": trellis.ErrNamespaceNotFound,
	"ErrNamespaceExists": trellis.ErrNamespaceExists, "ErrQueueNotFound": trellis.ErrQueueNotFound,
	"ErrQueueExists": trellis.ErrQueueExists, "ErrQueueState": trellis.ErrQueueState,
	"ErrUnauthenticated": trellis.ErrUnauthenticated, "ErrPermissionDenied": trellis.ErrPermissionDenied,
	"ErrUnavailable": trellis.ErrUnavailable, "ErrRateLimited": trellis.ErrRateLimited,
	"ErrIdempotencyKeyConflict": trellis.ErrIdempotencyKeyConflict,
	"ErrScheduleNotFound":       trellis.ErrScheduleNotFound, "ErrScheduleExists": trellis.ErrScheduleExists,
	"ErrSchedulePaused": trellis.ErrSchedulePaused, "ErrScheduleNotPaused": trellis.ErrScheduleNotPaused,
}

// clientSideSentinels are the SDK's errors that no server answers, and why.
var clientSideSentinels = map[string]string{
	"ErrCancelled": "a run's outcome (RunError), not a call's", "ErrDeadlineExceeded": "a run's outcome",
	"ErrStepTimeout": "a step's outcome", "ErrStepTotalTimeout": "a step's outcome",
	"ErrStepOutcomeUnknown": "a step's outcome", "ErrEventTimeout": "a wait's outcome in a workflow",
	"ErrApprovalTimeout": "a wait's outcome in a workflow", "ErrDetachedChild": "a workflow's op",
	"ErrLeaseLost": "the worker protocol's (workerwire reasons)", "ErrTxNotSupported": "an embedded store's",
	"ErrHistoryFormat": "ParseHistory's, local", "ErrRemoteUnsupported": "the client refuses before any call",
	"ErrClosed":         "the client's own state; a server's closed store answers unavailable",
	"ErrInvalidOptions": "options refused before any call",
}

// Every exported sentinel of the root package is either answered by a server
// with exactly one problem code that reads back to the same value, or says
// why no server answers it.
func TestSentinelsHaveOneCode(t *testing.T) {
	for _, name := range rootSentinelNames(t) {
		err, served := servedSentinels[name]
		if _, local := clientSideSentinels[name]; served == local {
			t.Errorf("%s: list it in servedSentinels or clientSideSentinels (one of them)", name)
			continue
		}
		if !served {
			continue
		}
		var codes []string
		for _, e := range problem.Table() {
			if errors.Is(err, e.Err) {
				codes = append(codes, e.Code)
			}
		}
		if len(codes) != 1 {
			t.Errorf("%s matches codes %v, want one", name, codes)
			continue
		}
		if back := trellis.RemoteSentinel(codes[0]); back != err {
			t.Errorf("%s: code %q reads back as %v", name, codes[0], back)
		}
	}
	// The server's own sentinels are the SDK's where the concept is the same.
	for _, c := range []struct{ server, sdk error }{
		{server.ErrPermissionDenied, trellis.ErrPermissionDenied}, {server.ErrRateLimited, trellis.ErrRateLimited},
		{server.ErrUnavailable, trellis.ErrUnavailable}, {server.ErrIdempotencyKeyConflict, trellis.ErrIdempotencyKeyConflict},
		{server.ErrInvalidArgument, trellis.ErrInvalidParams}, {server.ErrBodyTooLarge, trellis.ErrPayloadTooLarge},
		{server.ErrRequestTimeout, trellis.ErrUnavailable},
	} {
		if !errors.Is(c.server, c.sdk) {
			t.Errorf("server's %q is not the SDK's %q", c.server, c.sdk)
		}
	}
}

// rootSentinelNames lists the exported Err variables of the root package's
// non-test files.
func rootSentinelNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("found %d sentinels in the root package: %v", len(names), names)
	}
	return names
}

// From outside: a client on a real server tells each kind of not-found apart
// by its code.
func TestRemoteNotFoundKinds(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := ctxT(t)
	c := e.client
	for _, k := range []struct {
		want error
		code string
		call func() error
	}{
		{trellis.ErrRunNotFound, "run_not_found", func() error { _, err := c.Get(ctx, "nope"); return err }},
		{trellis.ErrApprovalNotFound, "approval_not_found", func() error { _, err := c.GetApproval(ctx, "nope"); return err }},
		{trellis.ErrScheduleNotFound, "schedule_not_found", func() error { _, err := c.GetSchedule(ctx, "nope"); return err }},
		{trellis.ErrNamespaceNotFound, "namespace_not_found", func() error { _, err := c.GetNamespace(ctx, "nope"); return err }},
		{trellis.ErrQueueNotFound, "queue_not_found", func() error { _, err := c.GetQueue(ctx, "nope"); return err }},
	} {
		err := k.call()
		var re *trellis.RemoteError
		if !errors.Is(err, k.want) || !errors.As(err, &re) || re.Code != k.code || re.Status != 404 {
			t.Errorf("want %v (%s): got %v", k.want, k.code, err)
		}
		for _, other := range []error{trellis.ErrRunNotFound, trellis.ErrApprovalNotFound, trellis.ErrScheduleNotFound,
			trellis.ErrNamespaceNotFound, trellis.ErrQueueNotFound, trellis.ErrKeyNotFound} {
			if other != k.want && errors.Is(err, other) {
				t.Errorf("%v is also %v", err, other)
			}
		}
	}
}
