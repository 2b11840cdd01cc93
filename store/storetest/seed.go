package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Seeded creates: a run created with recorded history (Client.Reset).
var seedCases = []testCase{
	{"Seeded", createSeeded},
	{"SeedInvalid", createSeedInvalid},
}

func seedOps(at time.Time) []*store.Op {
	fin := at.Add(time.Millisecond)
	second := at.Add(time.Millisecond / 2) // the start of the attempt that succeeded
	return []*store.Op{
		{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Result: []byte(`"A"`), Attempts: 2,
			StartedAt: at, FinishedAt: &fin, AttemptLog: []store.Attempt{{Position: 0, Attempt: 1,
				Error: store.ErrorInfo{Message: "boom"}, StartedAt: at, FinishedAt: second}}, AttemptStartedAt: &second},
		{Position: 1, Kind: store.OpSet, Name: "k", Done: true, Result: []byte(`1`), Attempts: 1,
			StartedAt: fin, FinishedAt: &fin},
	}
}

// createSeeded creates a run with two recorded ops, one failed attempt and a run
// store value: history, attempts and value read back, and a claim returns them.
func createSeeded(t *testing.T, e *env) {
	now := e.clk.Advance(time.Second)
	p := e.params()
	p.History = seedOps(now)
	p.KV = []store.KVWrite{{Key: "k", Value: []byte(`1`)}, {Key: "gone", Value: []byte(`2`)}, {Key: "gone", Delete: true}}
	res, err := e.st.RunCreate(e.ctx, p)
	if err != nil || !res.Created || res.Run.Status != store.StatusPending || res.Run.Attempts != 1 {
		t.Fatalf("seeded RunCreate = %+v, %v; want a created pending run with one attempt", res, err)
	}
	h := e.history(p.ID)
	if len(h) != 2 || h[0].Name != "a" || !bytes.Equal(h[0].Result, []byte(`"A"`)) || h[0].Attempts != 2 ||
		len(h[0].AttemptLog) != 1 || h[0].AttemptLog[0].Error.Message != "boom" || h[1].Kind != store.OpSet {
		t.Fatalf("seeded history = %+v", h)
	}
	v, err := e.st.KVGet(e.ctx, &store.KVGetParams{Namespace: p.Namespace, Ref: p.ID, Key: "k"})
	if err != nil || string(v) != "1" {
		t.Fatalf("KVGet(k) = %q, %v; want 1", v, err)
	}
	_, err = e.st.KVGet(e.ctx, &store.KVGetParams{Namespace: p.Namespace, Ref: p.ID, Key: "gone"})
	wantErr(t, "KVGet of a deleted key", err, store.ErrKeyNotFound)
	wantTimePtr(t, "seeded AttemptStartedAt", h[0].AttemptStartedAt, *p.History[0].AttemptStartedAt)
	cr := e.claimOne(p.ID)
	if len(cr.History) != 2 || cr.History[1].Name != "k" || len(cr.History[0].AttemptLog) != 1 {
		t.Fatalf("claimed history = %+v, want the two seeded ops", cr.History)
	}
	wantTimePtr(t, "claimed AttemptStartedAt", cr.History[0].AttemptStartedAt, *p.History[0].AttemptStartedAt)
}

// createSeedInvalid: seeds with an unfinished op, a repeated position, a claim or
// return-existing are rejected and create nothing.
func createSeedInvalid(t *testing.T, e *env) {
	now := e.clk.Now()
	for name, mod := range map[string]func(p *store.RunCreateParams){
		"op not done":     func(p *store.RunCreateParams) { p.History[1].Done = false },
		"repeated op":     func(p *store.RunCreateParams) { p.History[1].Position = 0 },
		"with claim":      func(p *store.RunCreateParams) { p.Claim = &store.CreateClaim{Worker: "w", LeaseDuration: leaseDur} },
		"return existing": func(p *store.RunCreateParams) { p.Reuse = store.ReuseReturnExisting },
		"kv without ops":  func(p *store.RunCreateParams) { p.History = nil; p.KV = []store.KVWrite{{Key: "k"}} },
	} {
		p := e.params()
		p.History = seedOps(now)
		mod(p)
		_, err := e.st.RunCreate(e.ctx, p)
		wantErr(t, "seeded RunCreate with "+name, err, store.ErrInvalidParams)
	}
	if ids := e.listIDs(store.RunListParams{}); len(ids) != 0 {
		t.Fatalf("rejected creates left runs %v", ids)
	}
}
