package trellis

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// doSendEvent is SendEvent without the call interceptors.
func (c *Client) doSendEvent(ctx context.Context, ref, name string, payload any) error {
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
	if c.remote != nil {
		if err := c.remote.sendEvent(ctx, ref, name, b); err != nil {
			return fmt.Errorf("sending event %q to %s: %w", name, ref, err)
		}
		return nil
	}
	if err := c.eventLimit(ctx, ref, name, len(b)); err != nil {
		return fmt.Errorf("sending event %q to %s: %w", name, ref, err)
	}
	p := &store.EventSendParams{Namespace: c.cfg.Namespace, Ref: ref, Name: name, Payload: b,
		Idempotency: idempotency(ctx, noResult)}
	// If the event wakes a run this process's worker runs and it has a free
	// slot, the store leases the run to it in the same transaction.
	reserved := c.worker != nil && c.worker.Reserve()
	sctx := ctx
	if reserved {
		p.Claim = &store.EventClaim{Worker: c.worker.Name(), LeaseDuration: c.worker.LeaseDuration(),
			Workflows: c.reg.names(), Queues: c.cfg.Worker.Queues, Versions: c.reg.versions()}
		var cancel context.CancelFunc
		sctx, cancel = claimedCreateContext(ctx, p.Claim.LeaseDuration)
		defer cancel()
	}
	res, err := c.store.EventSend(sctx, p)
	switch {
	case reserved && err == nil && res.Claimed != nil:
		c.engine.Begin(res.Claimed.Run.ID)
		c.worker.Launch(res.Claimed)
	case reserved:
		c.worker.Unreserve()
	}
	if err != nil {
		return fmt.Errorf("sending event %q to %s: %w", name, ref, err)
	}
	return nil
}
