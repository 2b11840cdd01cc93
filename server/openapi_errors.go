package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/trellis-dev/trellis/internal/problem"
)

// The error answers each operation declares in the OpenAPI document, by
// problem code (internal/problem): those of every route (its path's checks,
// authentication, authorization, the caps), those its path parameters name,
// its body, its idempotency key, and the conflicts and refusals of its own
// handler (opCodes). TestOpenAPIErrorsFromOutside checks them against a real
// server's answers.

// opCodes are the codes an operation's handler answers beyond what its route
// says (path parameters, body, key): its conflicts and its own not-founds.
var opCodes = map[string][]string{
	"startRun":         {"run_exists", "storage_full"},
	"startRuns":        {"storage_full"}, // each run's own outcome is in its result
	"deleteRun":        {"run_active"},
	"cancelRun":        {"run_finished"},
	"resumeRun":        {"run_not_blocked", "run_finished"},
	"resetRun":         {"run_active", "storage_full"},
	"sendEvent":        {"run_finished"},
	"getValue":         {"key_not_found"},
	"approve":          {"approval_decided"},
	"reject":           {"approval_decided"},
	"createNamespace":  {"namespace_exists"},
	"getNamespace":     {"namespace_not_found"},
	"updateNamespace":  {"namespace_not_found"},
	"createQueue":      {"namespace_not_found", "queue_exists"},
	"listQueues":       {"namespace_not_found"},
	"pauseQueue":       {"queue_state"},
	"resumeQueue":      {"queue_state"},
	"createSchedule":   {"schedule_exists"},
	"pauseSchedule":    {"schedule_paused"},
	"resumeSchedule":   {"schedule_not_paused"},
	"triggerSchedule":  {"run_exists", "storage_full"},
	"backfillSchedule": {"storage_full"},
	"createToken":      {"token_exists"},
	"rotateToken":      {"token_inactive"},
}

// paramCodes are the not-founds of a path parameter, by the path segment
// before it.
var paramCodes = map[string]string{
	"runs/{id}":        "run_not_found",
	"approvals/{id}":   "approval_not_found",
	"queues/{queue}":   "queue_not_found",
	"schedules/{name}": "schedule_not_found",
	"tokens/{name}":    "token_not_found",
}

// errorCodes returns the codes of rt's error answers, by HTTP status (5xx
// but unavailable and storage_full go to the document's default answer).
func errorCodes(rt route) map[int][]string {
	codes := []string{"invalid_argument"} // every path is checked (canonical form, encoded slashes)
	if !rt.public {
		codes = append(codes, "unauthenticated", "permission_denied", "rate_limited", "unavailable")
	}
	if rt.op == "readyz" {
		codes = append(codes, "unavailable")
	}
	for seg, code := range paramCodes {
		if strings.Contains(rt.pattern, "/"+seg) {
			codes = append(codes, code)
		}
	}
	if rt.method != http.MethodGet {
		// A body that is not JSON (on an --insecure server, a state-changing
		// request without Content-Type: application/json).
		codes = append(codes, "unsupported_media_type")
	}
	if rt.request != nil {
		codes = append(codes, "payload_too_large", "request_timeout")
	}
	if rt.takesKey() {
		codes = append(codes, "idempotency_key_conflict")
	}
	codes = append(codes, opCodes[rt.op]...)
	out := map[int][]string{}
	for _, c := range codes {
		e, ok := problem.Of(c)
		if !ok { // TestOpenAPIErrorCodes keeps the tables above to internal/problem's codes
			continue
		}
		if !slices.Contains(out[e.Status], c) {
			out[e.Status] = append(out[e.Status], c)
		}
	}
	for _, cs := range out {
		slices.Sort(cs)
	}
	return out
}
