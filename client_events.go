package trellis

import (
	"context"
	"fmt"
)

// SendEvent sends an event to a run (by run ID, or workflow ID meaning its
// latest run): payload is encoded with the client's codec and kept in the run's
// inbox until the run takes it. It is durable when SendEvent returns, and wakes
// the run at once if it waits for that name. ErrRunNotFound or ErrRunFinished
// when there is no active run to receive it.
func (c *Client) SendEvent(ctx context.Context, ref, name string, payload any) error {
	return c.call(ctx, ClientCall{Method: "SendEvent", Ref: ref}, func(ctx context.Context) error {
		if name == "" {
			return fmt.Errorf("sending event: %w: empty name", ErrInvalidParams)
		}
		b, err := c.cfg.Codec.Marshal(payload)
		if err != nil {
			return fmt.Errorf("encoding event %q: %w", name, err)
		}
		if len(b) > c.cfg.MaxPayloadBytes {
			return fmt.Errorf("%w: event %q is %d bytes (limit %d)", ErrPayloadTooLarge, name, len(b), c.cfg.MaxPayloadBytes)
		}
		if err := c.b.sendEvent(ctx, ref, name, b); err != nil {
			return fmt.Errorf("sending event %q to %s: %w", name, ref, err)
		}
		return nil
	})
}
