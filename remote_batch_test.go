package trellis_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/trellis-dev/trellis"
)

// StartMany and Delete through a server: the same outcomes as on a store.
func TestRemoteStartManyAndDelete(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := ctxT(t)
	reqs := []trellis.StartRequest{
		{Workflow: "remote-echo", Input: []byte(`{"n":1}`), Options: trellis.StartOptions{ID: "a"}},
		{Workflow: "remote-echo", Input: []byte(`{"n":2}`)},
		{Workflow: "remote-echo", Input: []byte(`{"n":3}`), Options: trellis.StartOptions{ID: "a"}},
	}
	res := must[[]trellis.StartResult](t)(e.client.StartMany(ctx, reqs))
	if len(res) != 3 || !res[0].Created || !res[1].Created || res[2].Created || !errors.Is(res[2].Error, trellis.ErrRunExists) {
		t.Fatalf("results %+v", res)
	}
	for i, r := range res[:2] {
		done := must[*trellis.Run](t)(e.client.Wait(ctx, r.Run.ID))
		if string(done.Output) != fmt.Sprintf(`{"n":%d}`, i+1) {
			t.Fatalf("run %d output %s", i, done.Output)
		}
	}
	if err := e.client.Delete(ctx, res[0].Run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Get(ctx, res[0].Run.ID); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
	if _, err := e.client.StartMany(ctx, []trellis.StartRequest{{Workflow: "remote-echo", Input: []byte("{")}}); !errors.Is(err, trellis.ErrInvalidInput) {
		t.Fatalf("StartMany with bad JSON = %v", err)
	}
}
