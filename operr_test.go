package trellis

import (
	"errors"
	"fmt"
	"testing"
)

func TestOpErr(t *testing.T) {
	t.Parallel()
	base := fmt.Errorf("getting queue: %w: %q in namespace %q", ErrQueueNotFound, "q", "default")
	for _, tc := range []struct {
		name string
		op   string
		err  error
		want string
	}{
		{"wrapped", `getting queue "q"`, ErrQueueNotFound, `getting queue "q": queue not found`},
		{"the store's words replaced", `getting queue "q"`, base, `getting queue "q": queue not found: "q" in namespace "default"`},
		{"said already", `getting queue "q"`, fmt.Errorf(`getting queue "q": %w`, ErrQueueNotFound), `getting queue "q": queue not found`},
		{"no name", "listing queues", fmt.Errorf("listing queues: %w", ErrNamespaceNotFound), "listing queues: namespace not found"},
	} {
		got := opErr(tc.op, tc.err)
		if got.Error() != tc.want || !errors.Is(got, tc.err) {
			t.Errorf("%s: opErr = %q (errors.Is %v), want %q", tc.name, got, errors.Is(got, tc.err), tc.want)
		}
	}
}
