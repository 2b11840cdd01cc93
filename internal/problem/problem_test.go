package problem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/trellis-dev/trellis/internal/errs"
	"github.com/trellis-dev/trellis/store"
)

// The table is one to one both ways: no code and no sentinel twice, every
// sentinel (wrapped as callers wrap it) finds its own entry and not an
// earlier one, and every code reads back to the sentinel it was written for.
func TestOneToOne(t *testing.T) {
	codes, sentinels := map[string]bool{}, map[error]string{}
	for _, e := range Table() {
		if e.Code == "" || e.Title == "" || e.Err == nil || http.StatusText(e.Status) == "" || e.Status < 400 {
			t.Errorf("entry %+v is incomplete", e)
		}
		if codes[e.Code] {
			t.Errorf("code %q twice", e.Code)
		}
		codes[e.Code] = true
		if c, ok := sentinels[e.Err]; ok {
			t.Errorf("sentinel %q has codes %q and %q", e.Err, c, e.Code)
		}
		sentinels[e.Err] = e.Code
		got, ok := For(fmt.Errorf("doing a thing: %w: %s", e.Err, "what"))
		if !ok || got.Code != e.Code {
			t.Errorf("%q is answered %q, want %q", e.Err, got.Code, e.Code)
		}
		back, ok := Of(e.Code)
		if !ok || back.Err != e.Err || back.Status != e.Status {
			t.Errorf("code %q reads back as %v (%d), want %v (%d)", e.Code, back.Err, back.Status, e.Err, e.Status)
		}
	}
	if codes[Internal] {
		t.Errorf("%q is the code of errors the table does not know; no entry may have it", Internal)
	}
	if _, ok := Of(Internal); ok {
		t.Error("the internal code reads back as a sentinel")
	}
	if got := Codes(); len(got) != len(Table())+1 || got[len(got)-1] != Internal {
		t.Errorf("Codes() = %v", got)
	}
}

// Each kind of not-found has its own code: a client tells them apart by
// code, never by title.
func TestNotFoundCodes(t *testing.T) {
	for err, code := range map[error]string{
		store.ErrRunNotFound: "run_not_found", store.ErrKeyNotFound: "key_not_found",
		store.ErrApprovalNotFound: "approval_not_found", store.ErrNamespaceNotFound: "namespace_not_found",
		store.ErrQueueNotFound: "queue_not_found", store.ErrScheduleNotFound: "schedule_not_found",
		store.ErrTokenNotFound: "token_not_found", errs.ErrRouteNotFound: "route_not_found",
	} {
		e, ok := For(err)
		if !ok || e.Code != code || e.Status != http.StatusNotFound {
			t.Errorf("%q: %q %d, want %q 404", err, e.Code, e.Status, code)
		}
	}
	for _, e := range Table() {
		if e.Code == "not_found" {
			t.Error(`the shared code "not_found" is back`)
		}
	}
}

// Errors of other layers that the server answers as unavailable read back as
// ErrUnavailable; a request timeout is its own code and an Unavailable too.
func TestUnavailable(t *testing.T) {
	for _, err := range []error{store.ErrClosed, store.ErrNoStore, context.Canceled, context.DeadlineExceeded,
		fmt.Errorf("reading: %w", context.DeadlineExceeded)} {
		e, ok := For(err)
		if !ok || e.Code != "unavailable" || e.Status != http.StatusServiceUnavailable || e.Err != errs.ErrUnavailable {
			t.Errorf("%v: %+v", err, e)
		}
	}
	if e, _ := For(errs.ErrRequestTimeout); e.Code != "request_timeout" || !errors.Is(e.Err, errs.ErrUnavailable) {
		t.Errorf("request timeout: %+v, or not an Unavailable", e)
	}
	if _, ok := For(errors.New("disk on fire")); ok {
		t.Error("an unknown error has an entry")
	}
}
