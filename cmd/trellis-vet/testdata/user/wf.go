package user

import (
	"context"
	"time"

	"github.com/trellis-dev/trellis"
)

var Order = trellis.NewWorkflow("order", func(wc *trellis.Context, in map[string]int) (int, error) {
	_ = time.Now()
	n := 0
	for _, v := range in {
		n += v
	}
	_, err := trellis.Step(wc, "stamp", func(ctx context.Context) (time.Time, error) { return time.Now(), nil })
	return n, err
})

func Plain() time.Time { return time.Now() }
