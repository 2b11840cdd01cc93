package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var sessionCases = []testCase{
	{"EndThenEnded", sessionEndThenEnded},
	{"EndTwice", sessionEndTwice},
	{"PurgeExpiredOnly", sessionPurgeExpiredOnly},
	{"PurgeLimit", sessionPurgeLimit},
	{"InvalidParams", sessionInvalidParams},
}

// sessionID returns a session ID of 16 bytes made from b.
func sessionID(b byte) []byte { return bytes.Repeat([]byte{b}, store.MinSessionIDSize) }

func (e *env) endSession(id []byte, expires time.Time) {
	e.t.Helper()
	if err := e.st.SessionEnd(e.ctx, &store.SessionEndParams{ID: id, ExpiresAt: expires}); err != nil {
		e.t.Fatalf("SessionEnd(%x): %v", id, err)
	}
}

func (e *env) sessionEnded(id []byte) bool {
	e.t.Helper()
	ended, err := e.st.SessionEnded(e.ctx, &store.SessionEndedParams{ID: id})
	if err != nil {
		e.t.Fatalf("SessionEnded(%x): %v", id, err)
	}
	return ended
}

func sessionEndThenEnded(t *testing.T, e *env) {
	a, b := sessionID('a'), sessionID('b')
	if e.sessionEnded(a) {
		t.Fatal("SessionEnded of a session never ended = true")
	}
	e.endSession(a, e.clk.Now().Add(time.Hour))
	if !e.sessionEnded(a) {
		t.Error("SessionEnded after SessionEnd = false")
	}
	if e.sessionEnded(b) {
		t.Error("SessionEnded of another session = true")
	}
	long := bytes.Repeat([]byte{'c'}, store.MaxSessionIDSize)
	e.endSession(long, e.clk.Now().Add(time.Hour))
	if !e.sessionEnded(long) {
		t.Errorf("SessionEnded of an ID of %d bytes = false", store.MaxSessionIDSize)
	}
}

func sessionEndTwice(t *testing.T, e *env) {
	id := sessionID('a')
	e.endSession(id, e.clk.Now().Add(time.Hour))
	e.endSession(id, e.clk.Now().Add(2*time.Hour)) // a second sign-out of a copy
	if !e.sessionEnded(id) {
		t.Error("SessionEnded after two SessionEnd = false")
	}
}

func sessionPurgeExpiredOnly(t *testing.T, e *env) {
	soon, later := sessionID('s'), sessionID('l')
	e.endSession(soon, e.clk.Now().Add(time.Minute))
	e.endSession(later, e.clk.Now().Add(time.Hour))
	if n, err := e.st.SessionsPurge(e.ctx, &store.SessionsPurgeParams{}); err != nil || n != 0 {
		t.Fatalf("SessionsPurge before any expiry = %d, %v; want 0", n, err)
	}
	e.clk.Advance(time.Minute) // soon's expiry: its cookie is refused for its age now
	n, err := e.st.SessionsPurge(e.ctx, &store.SessionsPurgeParams{})
	if err != nil || n != 1 {
		t.Fatalf("SessionsPurge at the first expiry = %d, %v; want 1", n, err)
	}
	if e.sessionEnded(soon) || !e.sessionEnded(later) {
		t.Errorf("after the purge: ended(soon) = %v, ended(later) = %v; want false, true", e.sessionEnded(soon), e.sessionEnded(later))
	}
}

func sessionPurgeLimit(t *testing.T, e *env) {
	for i := range 5 {
		e.endSession(sessionID(byte('a'+i)), e.clk.Now().Add(time.Second))
	}
	e.clk.Advance(time.Hour)
	total := 0
	for _, want := range []int{2, 2, 1, 0} {
		n, err := e.st.SessionsPurge(e.ctx, &store.SessionsPurgeParams{Limit: 2})
		if err != nil || n != want {
			t.Fatalf("SessionsPurge(limit 2) = %d, %v; want %d", n, err, want)
		}
		total += n
	}
	if total != 5 {
		t.Errorf("purged %d records, want 5", total)
	}
}

func sessionInvalidParams(t *testing.T, e *env) {
	for name, p := range map[string]*store.SessionEndParams{
		"short ID":  {ID: []byte("short"), ExpiresAt: e.clk.Now().Add(time.Hour)},
		"long ID":   {ID: bytes.Repeat([]byte{'x'}, store.MaxSessionIDSize+1), ExpiresAt: e.clk.Now().Add(time.Hour)},
		"no expiry": {ID: sessionID('a')},
		"nil ID":    {ExpiresAt: e.clk.Now().Add(time.Hour)},
	} {
		if err := e.st.SessionEnd(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("%s: SessionEnd = %v, want ErrInvalidParams", name, err)
		}
	}
	if _, err := e.st.SessionEnded(e.ctx, &store.SessionEndedParams{ID: []byte("short")}); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("SessionEnded(short ID) = %v, want ErrInvalidParams", err)
	}
	if e.sessionEnded(sessionID('a')) {
		t.Error("a refused SessionEnd recorded the session")
	}
}
