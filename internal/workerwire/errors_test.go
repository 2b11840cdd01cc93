package workerwire

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis/internal/auth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/store"
)

// Every sentinel crosses the wire and back: errors.Is holds on the worker's
// side, with the code and the reason of the table, and the message kept.
func TestSentinelsRoundTrip(t *testing.T) {
	for _, s := range sentinels {
		sent := fmt.Errorf("checkpointing run r1: %w", s.err)
		got := FromConnect(ToConnect(sent))
		var e *Error
		if !errors.As(got, &e) || !errors.Is(got, s.err) || e.Code != s.code || e.Reason != s.reason || e.Error() != sent.Error() {
			t.Errorf("%v came back as %#v", sent, got)
		}
		if d := FromDetail(mustDetail(sent)); !errors.Is(d, s.err) {
			t.Errorf("%v: per-item detail came back as %v", sent, d)
		}
	}
	other := FromConnect(ToConnect(errors.New("disk on fire")))
	if connect.CodeOf(ToConnect(errors.New("x"))) != connect.CodeInternal || errors.Is(other, store.ErrLeaseLost) || errors.Is(other, auth.ErrUnauthenticated) {
		t.Errorf("an unknown error came back as %v", other)
	}
}

func mustDetail(err error) *pb.ErrorDetail {
	_, d := Detail(err)
	return d
}
