package trellis

import "context"

// The Client methods below run their work (the do* methods) inside the call
// interceptors (Interceptor.Call).

// Get returns a run by run ID or workflow ID (the latest run with that ID).
func (c *Client) Get(ctx context.Context, ref string) (*Run, error) {
	return callV(ctx, c, ClientCall{Method: "Get", Ref: ref}, func(ctx context.Context) (*Run, error) { return c.doGet(ctx, ref) })
}

// List lists runs, newest first.
func (c *Client) List(ctx context.Context, o ListOptions) (*RunPage, error) {
	return callV(ctx, c, ClientCall{Method: "List"}, func(ctx context.Context) (*RunPage, error) { return c.doList(ctx, o) })
}

// Cancel cancels a run. A run that has not started ends cancelled at once; a running
// or waiting run stops at its next op (its current step's context is cancelled), may
// run cleanup steps through Context.Detached, and ends cancelled.
func (c *Client) Cancel(ctx context.Context, ref string) error {
	return c.call(ctx, ClientCall{Method: "Cancel", Ref: ref}, func(ctx context.Context) error { return c.doCancel(ctx, ref) })
}

// Resume makes a blocked run pending again, to replay with the code now deployed.
func (c *Client) Resume(ctx context.Context, ref string) error {
	return c.call(ctx, ClientCall{Method: "Resume", Ref: ref}, func(ctx context.Context) error { return c.doResume(ctx, ref) })
}

// Wait blocks until the run reaches a final state and returns it. It is woken by a
// push from the store; changes from other processes without push are seen within
// Worker.PollInterval. Through a server, Wait long-polls the run's result, and
// rides out a server restart: a server it cannot reach is tried again with
// backoff (100 ms doubling to 2 s), ErrUnavailable after ten tries in a row
// (about 12 s). Handle.Result waits the same way.
func (c *Client) Wait(ctx context.Context, ref string) (*Run, error) {
	return callV(ctx, c, ClientCall{Method: "Wait", Ref: ref}, func(ctx context.Context) (*Run, error) { return c.doWait(ctx, ref) })
}

// History returns a run's ops in position order, with every failed attempt.
func (c *Client) History(ctx context.Context, ref string) ([]*Op, error) {
	return callV(ctx, c, ClientCall{Method: "History", Ref: ref}, func(ctx context.Context) ([]*Op, error) { return c.doHistory(ctx, ref) })
}

// Value decodes the value a run stored under key (Context.Set) into v.
func (c *Client) Value(ctx context.Context, ref, key string, v any) error {
	return c.call(ctx, ClientCall{Method: "Value", Ref: ref}, func(ctx context.Context) error { return c.doValue(ctx, ref, key, v) })
}

// SendEvent sends an event to a run (by run ID, or workflow ID meaning its
// latest run): payload is encoded with the client's codec and kept in the run's
// inbox until the run takes it. It is durable when SendEvent returns, and wakes
// the run at once if it waits for that name. ErrRunNotFound or ErrRunFinished
// when there is no active run to receive it.
func (c *Client) SendEvent(ctx context.Context, ref, name string, payload any) error {
	return c.call(ctx, ClientCall{Method: "SendEvent", Ref: ref}, func(ctx context.Context) error {
		return c.doSendEvent(ctx, ref, name, payload)
	})
}

// callV is call for a method that returns a value.
func callV[T any](ctx context.Context, c *Client, cc ClientCall, f func(context.Context) (T, error)) (v T, err error) {
	err = c.call(ctx, cc, func(ctx context.Context) error {
		v, err = f(ctx)
		return err
	})
	return v, err
}
