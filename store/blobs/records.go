package blobs

import (
	"bytes"
	"context"
	"slices"

	"github.com/trellis-dev/trellis/store"
)

// The drivers call these at the edges of their store methods: the write
// helpers before a write (they return the parameters with references in place
// of the big payloads, a copy when anything changed: the caller's parameters
// are never changed), the read helpers on what a read returns. With nothing
// big, a write helper returns its argument and costs a length check a payload.

// Create moves the big payloads of a run's creation apart (input, seeded
// history, run store).
func (p *Payloads) Create(ctx context.Context, c *store.RunCreateParams) (*store.RunCreateParams, error) {
	if p == nil || !p.createBig(c) {
		return c, nil
	}
	q := *c
	var err error
	if q.Input, err = p.put(ctx, c.Namespace, c.ID, c.Input); err != nil {
		return nil, err
	}
	if q.History, err = p.cloneOps(ctx, c.Namespace, c.ID, c.History); err != nil {
		return nil, err
	}
	if q.KV, err = p.cloneKV(ctx, c.Namespace, c.ID, c.KV); err != nil {
		return nil, err
	}
	if c.Idempotency != nil && c.Idempotency.Response != nil {
		// The key's response renders the run with its input, not the reference.
		rec, render, input := *c.Idempotency, c.Idempotency.Response, c.Input
		rec.Response = func(result any) (int, []byte, error) {
			if r, ok := result.(*store.RunCreateResult); ok && r.Run != nil && IsRef(r.Run.Input) {
				rc, run := *r, *r.Run
				run.Input = input
				rc.Run = &run
				result = &rc
			}
			return render(result)
		}
		q.Idempotency = &rec
	}
	return &q, nil
}

// Known is what a write of c as q (Create's answer) stored apart: q's input
// stands for c's.
func Known(c, q *store.RunCreateParams) Written {
	if c == q || !IsRef(q.Input) || IsRef(c.Input) && string(c.Input) == string(q.Input) {
		return nil
	}
	return Written{string(q.Input): c.Input}
}

// CreateResult resolves what a creation returns: its run (and the claimed
// run, with its history), the payloads the creation stored apart from w.
func (p *Payloads) CreateResult(ctx context.Context, res *store.RunCreateResult, w Written) error {
	if res == nil {
		return nil
	}
	if err := p.runKnown(ctx, res.Run, w); err != nil {
		return err
	}
	return p.claimedKnown(ctx, res.Claimed, w)
}

// RunsCreate moves the big inputs of a batch apart.
func (p *Payloads) RunsCreate(ctx context.Context, c *store.RunsCreateParams) (*store.RunsCreateParams, error) {
	if p == nil {
		return c, nil
	}
	var runs []*store.RunCreateParams
	for i, r := range c.Runs {
		if !p.Big(r.Input) {
			continue
		}
		if runs == nil {
			runs = slices.Clone(c.Runs)
		}
		ns := r.Namespace
		if ns == "" {
			ns = c.Namespace
		}
		rc := *r
		var err error
		if rc.Input, err = p.Put(ctx, ns, r.ID, r.Input); err != nil {
			return nil, err
		}
		runs[i] = &rc
	}
	if runs == nil {
		return c, nil
	}
	q := *c
	q.Runs = runs
	return &q, nil
}

// Checkpoint moves the big payloads of a checkpoint apart: op results, run
// store values, the output, stream events' data, the inputs of the children
// it starts. Equal payloads of one checkpoint (a step's result that is the
// run's output, say) are stored once; the final stream event of a run whose
// output goes apart holds the output's reference, not a copy of it.
func (p *Payloads) Checkpoint(ctx context.Context, c *store.CheckpointParams) (*store.CheckpointParams, error) {
	if p == nil || !p.checkpointBig(c) {
		return c, nil
	}
	return p.checkpointMoved(ctx, c)
}

// checkpointMoved is Checkpoint for a checkpoint with big payloads. It is a
// function of its own so that the common checkpoint, which has none, does not
// take its frame: every run's workflow goroutine makes its checkpoints through
// here, and a frame the size of this one made each of them grow its stack
// from 4 to 8 KiB.
//
//go:noinline
func (p *Payloads) checkpointMoved(ctx context.Context, c *store.CheckpointParams) (*store.CheckpointParams, error) {
	ns, id := c.Lease.Namespace, c.Lease.RunID
	m := &memo{p: p, ns: ns}
	q := *c
	var err error
	if q.Output, err = m.put(ctx, id, c.Output); err != nil {
		return nil, err
	}
	if len(c.Ops) > 0 {
		q.Ops = slices.Clone(c.Ops)
		for i, op := range c.Ops {
			if !p.Big(op.Result) {
				continue
			}
			oc := *op
			if oc.Result, err = m.put(ctx, id, op.Result); err != nil {
				return nil, err
			}
			q.Ops[i] = &oc
		}
	}
	if len(c.KV) > 0 {
		q.KV = slices.Clone(c.KV)
		for i, kv := range c.KV {
			if q.KV[i].Value, err = m.put(ctx, id, kv.Value); err != nil {
				return nil, err
			}
		}
	}
	if len(c.Stream) > 0 {
		q.Stream = slices.Clone(c.Stream)
		for i, w := range c.Stream {
			if IsRef(q.Output) && isFinalOf(w, c.Output) {
				q.Stream[i].Data = append([]byte(store.FinalResultRefPrefix), q.Output...)
				continue
			}
			if q.Stream[i].Data, err = m.put(ctx, id, w.Data); err != nil {
				return nil, err
			}
		}
	}
	cloned := false
	for gi, g := range c.Children {
		var runs []*store.RunCreateParams
		for ri, r := range g.Runs {
			if !p.Big(r.Input) {
				continue
			}
			if runs == nil {
				runs = slices.Clone(g.Runs)
			}
			rc := *r
			if rc.Input, err = m.put(ctx, r.ID, r.Input); err != nil {
				return nil, err
			}
			runs[ri] = &rc
		}
		if runs == nil {
			continue
		}
		if !cloned {
			q.Children, cloned = slices.Clone(c.Children), true
		}
		gc := *g
		gc.Runs = runs
		q.Children[gi] = &gc
	}
	return &q, nil
}

// memo stores the big payloads of one write apart, each distinct one once.
type memo struct {
	p    *Payloads
	ns   string
	done []memoized
}

type memoized struct {
	runID string
	data  []byte
	ref   []byte
}

// put is Payloads.put, answering a payload equal to one it stored (for the
// same run) with the same reference.
func (m *memo) put(ctx context.Context, runID string, v []byte) ([]byte, error) {
	if !m.p.Big(v) {
		return v, nil
	}
	for _, d := range m.done {
		if d.runID == runID && bytes.Equal(d.data, v) {
			return d.ref, nil
		}
	}
	ref, err := m.p.Put(ctx, m.ns, runID, v)
	if err != nil {
		return nil, err
	}
	m.done = append(m.done, memoized{runID: runID, data: v, ref: ref})
	return ref, nil
}

// finalPrefix and finalSuffix wrap a run's output in its run.succeeded event
// (store.FinalEvent, for an output that is JSON).
const finalPrefix, finalSuffix = `{"result":`, `}`

// isFinalOf reports whether w is the run.succeeded event of output.
func isFinalOf(w store.StreamWrite, output []byte) bool {
	d := w.Data
	return w.Name == store.StreamRunSucceeded && len(d) == len(finalPrefix)+len(output)+len(finalSuffix) &&
		bytes.HasPrefix(d, []byte(finalPrefix)) && bytes.HasSuffix(d, []byte(finalSuffix)) &&
		bytes.Equal(d[len(finalPrefix):len(d)-len(finalSuffix)], output)
}

func (p *Payloads) checkpointBig(c *store.CheckpointParams) bool {
	if p.Big(c.Output) {
		return true
	}
	for _, op := range c.Ops {
		if p.Big(op.Result) {
			return true
		}
	}
	for _, kv := range c.KV {
		if p.Big(kv.Value) {
			return true
		}
	}
	for _, g := range c.Children {
		for _, r := range g.Runs {
			if p.Big(r.Input) {
				return true
			}
		}
	}
	for _, w := range c.Stream {
		if p.Big(w.Data) {
			return true
		}
	}
	return false
}

// Event moves a big event payload apart, as a payload of run runID (the run
// the event's Ref names).
func (p *Payloads) Event(ctx context.Context, c *store.EventSendParams, runID string) (*store.EventSendParams, error) {
	if !p.Big(c.Payload) {
		return c, nil
	}
	q := *c
	var err error
	if q.Payload, err = p.Put(ctx, c.Namespace, runID, c.Payload); err != nil {
		return nil, err
	}
	return &q, nil
}

// Run resolves a run's input and output.
func (p *Payloads) Run(ctx context.Context, r *store.Run) error { return p.runKnown(ctx, r, nil) }

// RunKnown is Run, taking the payloads a write just stored apart from w.
func (p *Payloads) RunKnown(ctx context.Context, r *store.Run, w Written) error {
	return p.runKnown(ctx, r, w)
}

func (p *Payloads) runKnown(ctx context.Context, r *store.Run, w Written) error {
	if r == nil {
		return nil
	}
	if err := p.resolveKnown(ctx, r.Namespace, &r.Input, w); err != nil {
		return err
	}
	return p.resolveKnown(ctx, r.Namespace, &r.Output, w)
}

// Runs resolves runs' inputs and outputs.
func (p *Payloads) Runs(ctx context.Context, rs []*store.Run) error {
	for _, r := range rs {
		if err := p.Run(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// Omit leaves the payloads stored apart out of runs read in a list (lazily:
// a list does not load them; RunGet does).
func Omit(rs []*store.Run) {
	for _, r := range rs {
		if IsRef(r.Input) {
			r.Input = nil
		}
		if IsRef(r.Output) {
			r.Output = nil
		}
	}
}

// OmitOps leaves the results stored apart out of ops.
func OmitOps(ops []*store.Op) {
	for _, op := range ops {
		if IsRef(op.Result) {
			op.Result = nil
		}
	}
}

// Ops resolves op results.
func (p *Payloads) Ops(ctx context.Context, namespace string, ops []*store.Op) error {
	return p.opsKnown(ctx, namespace, ops, nil)
}

func (p *Payloads) opsKnown(ctx context.Context, namespace string, ops []*store.Op, w Written) error {
	for _, op := range ops {
		if err := p.resolveKnown(ctx, namespace, &op.Result, w); err != nil {
			return err
		}
	}
	return nil
}

// Events resolves event payloads.
func (p *Payloads) Events(ctx context.Context, evs []*store.Event) error {
	return p.eventsKnown(ctx, evs, nil)
}

func (p *Payloads) eventsKnown(ctx context.Context, evs []*store.Event, w Written) error {
	for _, e := range evs {
		if err := p.resolveKnown(ctx, e.Namespace, &e.Payload, w); err != nil {
			return err
		}
	}
	return nil
}

// Claimed resolves what a worker needs of a claimed run: its input, history
// and inbox.
func (p *Payloads) Claimed(ctx context.Context, c *store.ClaimedRun) error {
	return p.claimedKnown(ctx, c, nil)
}

// ClaimedKnown is Claimed, taking the payloads a write just stored apart from w.
func (p *Payloads) ClaimedKnown(ctx context.Context, c *store.ClaimedRun, w Written) error {
	return p.claimedKnown(ctx, c, w)
}

func (p *Payloads) claimedKnown(ctx context.Context, c *store.ClaimedRun, w Written) error {
	if c == nil {
		return nil
	}
	if err := p.runKnown(ctx, c.Run, w); err != nil {
		return err
	}
	if err := p.opsKnown(ctx, c.Run.Namespace, c.History, w); err != nil {
		return err
	}
	return p.eventsKnown(ctx, c.Inbox, w)
}

// Value resolves one value (a run-store value).
func (p *Payloads) Value(ctx context.Context, namespace string, v []byte) ([]byte, error) {
	return p.Resolve(ctx, namespace, v)
}

// Stream resolves the output a run's final stream event carries.
func (p *Payloads) Stream(ctx context.Context, namespace string, r *store.StreamReadResult) error {
	if r == nil {
		return nil
	}
	for _, e := range r.Events {
		if bytes.HasPrefix(e.Data, []byte(store.FinalResultRefPrefix)) {
			out, err := p.Resolve(ctx, namespace, e.Data[len(store.FinalResultRefPrefix):])
			if err != nil {
				return err
			}
			e.Data = store.FinalEvent(store.StatusSucceeded, out, nil).Data
			continue
		}
		if err := p.resolve(ctx, namespace, &e.Data); err != nil {
			return err
		}
	}
	return nil
}
