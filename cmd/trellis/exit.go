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
	"github.com/trellis-dev/trellis/internal/problem"
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
// status, and the problem it prints under --json.
type errorClass struct {
	exit   int
	status int
	code   string
	title  string
}

// exitOf is the exit status of an error the HTTP API answers with, by the
// class of its HTTP status (the one table of errors, internal/problem, gives
// each sentinel its status).
func exitOf(status int) int {
	switch status {
	case 400, 413, 415, 431: // the request is malformed or too large: fix it
		return exitUsage
	case 401, 403:
		return exitPermission
	case 404:
		return exitNotFound
	case 409, 422: // the state does not allow it; an idempotency key reused
		return exitConflict
	case 408, 429, 502, 503, 504, 507: // retry later
		return exitUnavailable
	}
	return exitError
}

func apiClass(e problem.Entry) errorClass {
	return errorClass{exitOf(e.Status), e.Status, e.Code, e.Title}
}

// The classes of the errors no sentinel names.
var (
	usageClass     = errorClass{exitUsage, 400, "usage", "Usage error"}
	otherClass     = errorClass{exitError, 500, "error", "Error"}
	runFailedClass = errorClass{exitRunFailed, 0, "run_failed", "Run failed"}
	runCancelClass = errorClass{exitRunFailed, 0, "run_cancelled", "Run cancelled"}
	interruptClass = errorClass{exitInterrupted, 0, "interrupted", "Interrupted"}
	noStoreClass   = errorClass{exitNotFound, 404, "store_not_found", "Store not found"}
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
	// --store names no store: for the command line, a thing not found (a
	// server answers its own store missing as unavailable).
	if errors.Is(err, errNoStoreFile) || errors.Is(err, store.ErrNoStore) {
		return noStoreClass
	}
	// A server's problem: its code (one the SDK may not know), else its status.
	if status, code, title, ok := serverProblem(err); ok {
		if e, known := problem.Of(code); known {
			return apiClass(e)
		}
		if title == "" {
			title = http.StatusText(status)
		}
		return errorClass{exitOf(status), status, code, title}
	}
	// An error of the store or the SDK, by errors.Is on the sentinels.
	if e, known := problem.For(err); known {
		return apiClass(e)
	}
	// A store or server that cannot be reached: refused, unreachable, timed out.
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &opErr) || errors.As(err, &dnsErr) {
		e, _ := problem.Of("unavailable")
		return apiClass(e)
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

// problemDoc is an error as the HTTP API's problem documents are (docs/http-api.md),
// which trellis prints on stderr under --json.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// cliProblemBase prefixes the codes of the command line's own (usage,
// run_failed, ...) to form their type URI: the table of exit codes.
const cliProblemBase = "https://github.com/trellis-dev/trellis/blob/main/docs/cli.md#exit-codes"

func problemOf(err error, c errorClass) problemDoc {
	p := problemDoc{Title: c.title, Status: c.status, Code: c.code, Detail: err.Error()}
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
		p.Type = problem.TypeBase + p.Code
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
