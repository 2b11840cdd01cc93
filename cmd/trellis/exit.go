package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
)

// Exit statuses by class of error (docs/cli.md, "Exit codes"). A script tells
// "try again later" (unavailable) from "fix the request" (usage, not found,
// conflict) and from "the run ended badly" (run failed) without reading text.
const (
	exitOK          = 0
	exitError       = 1 // any other error
	exitUsage       = 2 // bad arguments or flags, or a request the store refuses as malformed
	exitNotFound    = 3 // no such run, approval, schedule, namespace, queue, token or store
	exitPermission  = 4 // unauthenticated, or the token lacks the grant
	exitConflict    = 5 // the state does not allow it: exists, finished, active, decided, ...
	exitUnavailable = 6 // the server or the store cannot be reached or is full; retry later
	exitRunFailed   = 8 // runs watch and runs result: the run failed or was cancelled
	exitInterrupted = 130
)

// errorClass is how the command line reports one kind of error: its exit
// status, and the problem it prints under --json (the HTTP API's code, status
// and title for the errors the API answers with; codes of the CLI's own for the
// rest).
type errorClass struct {
	exit   int
	status int
	code   string
	title  string
}

// errorClasses classifies errors by errors.Is on the root package's sentinels
// (the stable contract of the SDK); the first match wins.
var errorClasses = []struct {
	err error
	errorClass
}{
	{trellis.ErrUnauthenticated, errorClass{exitPermission, 401, "unauthenticated", "Unauthenticated"}},
	{trellis.ErrPermissionDenied, errorClass{exitPermission, 403, "permission_denied", "Permission denied"}},
	{server.ErrPermissionDenied, errorClass{exitPermission, 403, "permission_denied", "Permission denied"}},

	{trellis.ErrRunNotFound, errorClass{exitNotFound, 404, "not_found", "Run not found"}},
	{trellis.ErrKeyNotFound, errorClass{exitNotFound, 404, "not_found", "Key not found"}},
	{trellis.ErrApprovalNotFound, errorClass{exitNotFound, 404, "not_found", "Approval not found"}},
	{trellis.ErrNamespaceNotFound, errorClass{exitNotFound, 404, "not_found", "Namespace not found"}},
	{trellis.ErrQueueNotFound, errorClass{exitNotFound, 404, "not_found", "Queue not found"}},
	{trellis.ErrScheduleNotFound, errorClass{exitNotFound, 404, "not_found", "Schedule not found"}},
	{store.ErrTokenNotFound, errorClass{exitNotFound, 404, "not_found", "Token not found"}},
	{errNoStoreFile, errorClass{exitNotFound, 404, "store_not_found", "Store not found"}},
	{store.ErrNoStore, errorClass{exitNotFound, 404, "store_not_found", "Store not found"}},

	{trellis.ErrRunExists, errorClass{exitConflict, 409, "run_exists", "Run exists"}},
	{trellis.ErrRunFinished, errorClass{exitConflict, 409, "run_finished", "Run finished"}},
	{trellis.ErrRunActive, errorClass{exitConflict, 409, "run_active", "Run still active"}},
	{trellis.ErrRunNotBlocked, errorClass{exitConflict, 409, "run_not_blocked", "Run not blocked"}},
	{trellis.ErrApprovalDecided, errorClass{exitConflict, 409, "approval_decided", "Approval already decided"}},
	{trellis.ErrScheduleExists, errorClass{exitConflict, 409, "schedule_exists", "Schedule exists"}},
	{trellis.ErrSchedulePaused, errorClass{exitConflict, 409, "schedule_paused", "Schedule already paused"}},
	{trellis.ErrScheduleNotPaused, errorClass{exitConflict, 409, "schedule_not_paused", "Schedule not paused"}},
	{trellis.ErrNamespaceExists, errorClass{exitConflict, 409, "namespace_exists", "Namespace exists"}},
	{trellis.ErrQueueExists, errorClass{exitConflict, 409, "queue_exists", "Queue exists"}},
	{trellis.ErrQueueState, errorClass{exitConflict, 409, "queue_state", "Queue already in that state"}},
	{store.ErrTokenExists, errorClass{exitConflict, 409, "token_exists", "Token exists"}},
	{store.ErrTokenInactive, errorClass{exitConflict, 409, "token_inactive", "Token revoked or expired"}},
	{trellis.ErrIdempotencyKeyConflict, errorClass{exitConflict, 422, "idempotency_key_conflict", "Idempotency key conflict"}},
	{store.ErrIdempotencyKeyConflict, errorClass{exitConflict, 422, "idempotency_key_conflict", "Idempotency key conflict"}},

	{trellis.ErrUnknownWorkflow, errorClass{exitUsage, 400, "invalid_argument", "Unknown workflow"}},
	{trellis.ErrInvalidParams, errorClass{exitUsage, 400, "invalid_argument", "Invalid argument"}},
	{trellis.ErrInvalidInput, errorClass{exitUsage, 400, "invalid_argument", "Invalid argument"}},
	{trellis.ErrPayloadTooLarge, errorClass{exitUsage, 413, "payload_too_large", "Payload too large"}},

	{trellis.ErrStorageFull, errorClass{exitUnavailable, 507, "storage_full", "Insufficient storage"}},
	{trellis.ErrRateLimited, errorClass{exitUnavailable, 429, "rate_limited", "Rate limited"}},
	{trellis.ErrUnavailable, errorClass{exitUnavailable, 503, "unavailable", "Unavailable"}},
	{trellis.ErrClosed, errorClass{exitUnavailable, 503, "unavailable", "Unavailable"}},
	{syscall.ECONNREFUSED, errorClass{exitUnavailable, 503, "unavailable", "Unavailable"}},
}

// The classes of the errors no sentinel names.
var (
	usageClass     = errorClass{exitUsage, 400, "usage", "Usage error"}
	otherClass     = errorClass{exitError, 500, "error", "Error"}
	runFailedClass = errorClass{exitRunFailed, 0, "run_failed", "Run failed"}
	runCancelClass = errorClass{exitRunFailed, 0, "run_cancelled", "Run cancelled"}
	interruptClass = errorClass{exitInterrupted, 0, "interrupted", "Interrupted"}
)

// errNoStoreFile: --store names a SQLite file that does not exist.
var errNoStoreFile = errors.New("no store")

// errInterrupted: a signal (Ctrl-C, SIGTERM) ended the command.
var errInterrupted = errors.New("interrupted")

// runEndedError is a run that ended failed or cancelled, for the commands
// whose success is the run's (runs watch, runs result).
type runEndedError struct{ run *trellis.Run }

func (e *runEndedError) Error() string {
	msg := fmt.Sprintf("run %s (%s %s) %s", e.run.ID, e.run.Workflow, e.run.WorkflowID, e.run.Status)
	if e.run.Error != nil && e.run.Error.Message != "" {
		msg += ": " + e.run.Error.Message
	}
	return msg
}

// classify returns err's class.
func classify(err error) errorClass {
	var ue *usageError
	var re *runEndedError
	switch {
	case err == errInterrupted:
		return interruptClass
	case errors.As(err, &ue):
		return usageClass
	case errors.As(err, &re):
		if re.run.Status == trellis.StatusCancelled {
			return runCancelClass
		}
		return runFailedClass
	}
	for _, c := range errorClasses {
		if errors.Is(err, c.err) {
			return c.errorClass
		}
	}
	// A server's answer of a code the SDK does not know, or one read without
	// the SDK (the tokens and audit commands): by its code, else its status.
	if status, code, title, ok := serverProblem(err); ok {
		for _, c := range errorClasses {
			if c.code == code {
				return c.errorClass
			}
		}
		if title == "" {
			title = http.StatusText(status)
		}
		c := errorClass{exitError, status, code, title}
		switch {
		case status == 400 || status == 413 || status == 422:
			c.exit = exitUsage
		case status == 401 || status == 403:
			c.exit = exitPermission
		case status == 404:
			c.exit = exitNotFound
		case status == 409:
			c.exit = exitConflict
		case status == 429 || status == 502 || status == 503 || status == 504 || status == 507:
			c.exit = exitUnavailable
		}
		return c
	}
	// A store or server that cannot be reached: refused, unreachable, timed out.
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) {
		return errorClass{exitUnavailable, 503, "unavailable", "Unavailable"}
	}
	return otherClass
}

// serverProblem returns the status, code and title of the server's problem
// that err carries, if it does.
func serverProblem(err error) (status int, code, title string, ok bool) {
	var remote *trellis.RemoteError
	if errors.As(err, &remote) {
		return remote.Status, remote.Code, "", true
	}
	if p, ok := httpc.IsProblem(err); ok {
		return p.Status, p.Code, p.Title, true
	}
	return 0, "", "", false
}

// problem is an error as the HTTP API's problem documents are (docs/http-api.md),
// which trellis prints on stderr under --json.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// cliProblemBase prefixes the codes of the command line's own (usage,
// run_failed, ...) to form their type URI: the table of exit codes.
const cliProblemBase = "https://github.com/trellis-dev/trellis/blob/main/docs/cli.md#exit-codes"

func problemOf(err error, c errorClass) problem {
	p := problem{Title: c.title, Status: c.status, Code: c.code, Detail: err.Error()}
	if status, code, title, ok := serverProblem(err); ok && code != "" {
		p.Status, p.Code = status, code // the server's word
		if title != "" {
			p.Title = title
		}
	}
	switch p.Code {
	case "usage", "error", "run_failed", "run_cancelled", "store_not_found", "interrupted":
		p.Type = cliProblemBase
	default:
		p.Type = server.ProblemTypeBase + p.Code
	}
	return p
}

// report prints err and returns the exit status of its class: a line on
// stderr (and a hint for a usage error), or under --json a problem document.
func report(err error, asJSON bool, stderr io.Writer) int {
	c := classify(err)
	if asJSON {
		b, _ := json.Marshal(problemOf(err, c))
		fmt.Fprintf(stderr, "%s\n", b)
		return c.exit
	}
	var ue *usageError
	if errors.As(err, &ue) {
		ue.report(stderr)
		return c.exit
	}
	fmt.Fprintf(stderr, "trellis: %v\n", err)
	return c.exit
}

// wantsJSON reports whether args ask for JSON output (--json anywhere before a
// "--"), so that an error, a usage error included, is printed as JSON too.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--json" || a == "-json":
			return true
		case strings.HasPrefix(a, "--json=") || strings.HasPrefix(a, "-json="):
			_, v, _ := strings.Cut(a, "=")
			switch v {
			case "1", "t", "T", "true", "TRUE", "True":
				return true
			}
		}
	}
	return false
}

// interrupted reports whether err is the end of a command cancelled by a
// signal (ctx is main's).
func interrupted(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) && ctx.Err() != nil
}
