package workerwire

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
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

// A message that starts with its code's name is not sent with the name twice:
// clients print a Connect error as its code and its message.
func TestCodeNotRepeatedInMessage(t *testing.T) {
	err := ToConnect(fmt.Errorf("%w: unknown, revoked or expired token", auth.ErrUnauthenticated))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Message() != "unknown, revoked or expired token" || ce.Error() != "unauthenticated: unknown, revoked or expired token" {
		t.Fatalf("ToConnect = %v (message %q)", err, ce.Message())
	}
	if got := FromConnect(err); !errors.Is(got, auth.ErrUnauthenticated) || got.Error() != "unauthenticated: unknown, revoked or expired token" {
		t.Fatalf("FromConnect = %v", got)
	}
}

func mustDetail(err error) *pb.ErrorDetail {
	_, d := Detail(err)
	return d
}

// Every reason the server sends is listed where a worker in another language
// reads it: the comment of ErrorDetail.reason in worker.proto, and the Errors
// table of docs/worker-protocol.md with the reason's code.
func TestReasonsDocumented(t *testing.T) {
	codes := map[string]connect.Code{ReasonInternal: connect.CodeInternal, ReasonUnavailable: connect.CodeUnavailable}
	for _, s := range sentinels {
		codes[s.reason] = s.code
	}
	src, err := os.ReadFile("../../proto/trellis/worker/v1/worker.proto")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)  // reason: (.*?)\n  string reason = 1;`).FindSubmatch(src)
	if m == nil {
		t.Fatal("worker.proto: no comment on ErrorDetail.reason")
	}
	listed := regexp.MustCompile(`[A-Z_]+`).FindAllString(string(m[1]), -1)
	doc, err := os.ReadFile("../../docs/worker-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // reason: code
	for _, row := range regexp.MustCompile("(?m)^\\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \\| `([a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		for _, r := range regexp.MustCompile("[A-Z_]+").FindAllString(row[1], -1) {
			documented[r] = row[2]
		}
	}
	for reason, code := range codes {
		if !slices.Contains(listed, reason) {
			t.Errorf("worker.proto: ErrorDetail.reason's comment does not list %s", reason)
		}
		if documented[reason] != code.String() {
			t.Errorf("docs/worker-protocol.md: the Errors table gives %s code %q, want %q", reason, documented[reason], code)
		}
	}
	for _, r := range listed {
		if _, ok := codes[r]; !ok {
			t.Errorf("worker.proto lists reason %s, which the server never sends", r)
		}
	}
	for r := range documented {
		if _, ok := codes[r]; !ok {
			t.Errorf("docs/worker-protocol.md lists reason %s, which the server never sends", r)
		}
	}
}
