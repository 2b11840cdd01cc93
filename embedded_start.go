package trellis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/handoff"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
)

// The embedded backend's starts: Start and StartRaw, StartTx, StartMany and
// Reset, which create runs on the store.

func (e *embedded) start(ctx context.Context, def *definition, input []byte, o StartOptions) (*Run, error) {
	p := e.createParams(ctx, def, input, o)
	if err := e.applyRecords(ctx, def, o, p); err != nil {
		return nil, fmt.Errorf("starting %s: %w", def.name, err)
	}
	p.Idempotency = e.idempotency("createdRun")
	slots, cctx, cancel := e.claimSlots(ctx, p)
	defer cancel()
	res, err := e.store.RunCreate(cctx, p)
	handOver(slots, err, func(int) *store.ClaimedRun { return res.Claimed })
	if lapsed(ctx, cctx, err) {
		res, err = e.finishUnclaimed(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", def.name, err)
	}
	return runFromStore(res.Run), nil
}

// claimSlots reserves a slot, for each run of ps that a worker can take at
// once (reserveSlot: this process's worker, else, for a call of the
// server's, a waiting remote worker), and sets the run's Claim: the run is
// created claimed for it. It returns the slots (nil where none) and the
// create's context: ctx, or, when a slot was reserved, claimedCreateContext's
// for the shortest of the leases; cancel it once the create is over.
func (e *embedded) claimSlots(ctx context.Context, ps ...*store.RunCreateParams) ([]handoff.Slot, context.Context, context.CancelFunc) {
	slots := make([]handoff.Slot, len(ps))
	reserved, lease := false, time.Duration(0)
	for i, p := range ps {
		if slots[i] = e.reserveSlot(ctx, p); slots[i] != nil {
			p.Claim = slots[i].Claim()
			if !reserved || p.Claim.LeaseDuration < lease {
				lease = p.Claim.LeaseDuration
			}
			reserved = true
		}
	}
	if !reserved {
		return slots, ctx, func() {}
	}
	cctx, cancel := claimedCreateContext(ctx, lease)
	return slots, cctx, cancel
}

// handOver ends the reservations of claimSlots once the create is over: each
// slot gets the lease its run was created with (claimed, by the run's index),
// or nil when the create failed (err) or the store did not honour the claim.
func handOver(slots []handoff.Slot, err error, claimed func(i int) *store.ClaimedRun) {
	for i, slot := range slots {
		if slot == nil {
			continue
		}
		var cr *store.ClaimedRun
		if err == nil {
			cr = claimed(i)
		}
		slot.Done(cr)
	}
}

// A claimed create is bounded by its lease (claimedCreateContext), and a store
// slowed by load (a burst queued behind a busy database) can take longer: the
// write is then given up, its outcome unknown (it may still commit), its slots
// given back, while the caller's own context lasts and asked for no deadline.
// Rather than fail the start, it is finished unclaimed by the run IDs it chose:
// a run the first write made is returned as made (leased to a slot given
// back, it runs once that lease expires), any other is created now. The
// store's unique run IDs make the second write safe whatever the first did.

// lapsed reports whether a create failed because its claimed bound cctx ended
// while the caller's ctx lasts.
func lapsed(ctx, cctx context.Context, err error) bool {
	return err != nil && cctx != ctx && cctx.Err() != nil && ctx.Err() == nil
}

// finishUnclaimed finishes the start of p after its claimed create lapsed.
func (e *embedded) finishUnclaimed(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	p.Claim = nil
	made, err := e.madeRuns(ctx, p)
	if err != nil || made[p.ID] != nil {
		return &store.RunCreateResult{Run: made[p.ID], Created: true}, err
	}
	res, err := e.store.RunCreate(ctx, p)
	if err != nil { // the first write may have committed meanwhile
		if made, gerr := e.madeRuns(ctx, p); gerr == nil && made[p.ID] != nil {
			return &store.RunCreateResult{Run: made[p.ID], Created: true}, nil
		}
	}
	return res, err
}

// finishManyUnclaimed finishes a batch start after its claimed create lapsed:
// the batch's write is one transaction, so either its runs exist or none do.
func (e *embedded) finishManyUnclaimed(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	for _, rp := range p.Runs {
		rp.Claim = nil
	}
	made, err := e.madeRuns(ctx, p.Runs...)
	if err != nil {
		return nil, err
	}
	if len(made) == 0 {
		res, cerr := e.store.RunsCreate(ctx, p)
		if cerr == nil {
			return res, nil
		}
		if made, err = e.madeRuns(ctx, p.Runs...); err != nil || len(made) == 0 { // not committed meanwhile
			return nil, cerr
		}
	}
	// The first write committed: its runs as made; an item it did not make (its
	// reuse policy refused it) is started again on its own, as a retry would.
	res := &store.RunsCreateResult{Items: make([]store.RunsCreateItem, len(p.Runs))}
	for i, rp := range p.Runs {
		if r := made[rp.ID]; r != nil {
			res.Items[i] = store.RunsCreateItem{Run: r, Created: true}
			continue
		}
		one, err := e.store.RunCreate(ctx, rp)
		if err != nil && !errors.Is(err, store.ErrRunExists) {
			return nil, err
		}
		res.Items[i] = store.RunsCreateItem{Err: err}
		if one != nil {
			res.Items[i].Run, res.Items[i].Created = one.Run, one.Created
		}
	}
	return res, nil
}

// madeRuns returns the runs of ps (by their run IDs) that the store holds.
func (e *embedded) madeRuns(ctx context.Context, ps ...*store.RunCreateParams) (map[string]*store.Run, error) {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	runs, err := e.store.RunsGet(ctx, &store.RunsGetParams{Namespace: e.cfg.Namespace, IDs: ids})
	if err != nil {
		return nil, err
	}
	made := make(map[string]*store.Run, len(runs))
	for _, r := range runs {
		made[r.ID] = r
	}
	return made, nil
}

// claimedCreateContext is the context of a store write that may create a run
// leased to a worker waiting for it (a hand-off): the caller's, but not ended
// when the caller goes (a client that closed its connection before the
// answer). Abandoned half-way, the write could still commit, its answer lost:
// the run would stay leased to a worker never told of it until the lease
// expired. Completed, the run reaches the worker (or, if the worker's stream
// has gone, is handed back at once). The write is bounded by the lease
// duration: past it, a lost answer strands nothing.
func claimedCreateContext(ctx context.Context, lease time.Duration) (context.Context, context.CancelFunc) {
	if lease <= 0 {
		lease = worker.DefaultLeaseDuration
	}
	return context.WithTimeout(context.WithoutCancel(ctx), lease)
}

// createParams are the parameters of a new run of def started by a call with
// ctx: its executions join the trace of the span in ctx.
func (e *embedded) createParams(ctx context.Context, def *definition, input []byte, o StartOptions) *store.RunCreateParams {
	return runParams(e.cfg.Namespace, def, uuid.Must(uuid.NewV7()).String(), input, o, traceParentOf(ctx))
}

// reserveSlot returns a slot for the run of p to be created already claimed:
// one of this client's worker when it runs the workflow and queue of p and has
// a free slot (the run starts without waiting for a claim), else, for a call of
// the server's (see package handoff), one of a remote worker whose claim stream
// waits with a free slot. It returns nil when there is none, or when the run
// starts later.
func (e *embedded) reserveSlot(ctx context.Context, p *store.RunCreateParams) handoff.Slot {
	if p.AvailableAt != nil || len(p.History) > 0 {
		return nil
	}
	if e.worker != nil && e.servesLocally(p) && e.worker.Reserve() {
		return localSlot{e}
	}
	if o := e.calls.handoff; o != nil {
		return o.Reserve(p.Namespace, p.Workflow, p.Queue, p.PinVersion())
	}
	return nil
}

// servesLocally reports whether this client's worker runs the workflow,
// queue and (for a pinned run) version of p.
func (e *embedded) servesLocally(p *store.RunCreateParams) bool {
	if !e.reg.serves(p) {
		return false
	}
	qs := e.cfg.Worker.Queues
	return len(qs) == 0 || slices.Contains(qs, p.Queue)
}

// localSlot is a slot of this client's worker reserved by Worker.Reserve.
type localSlot struct{ e *embedded }

func (s localSlot) Claim() *store.CreateClaim {
	return &store.CreateClaim{Worker: s.e.worker.Name(), LeaseDuration: s.e.worker.LeaseDuration()}
}

func (s localSlot) Done(cr *store.ClaimedRun) {
	if cr == nil {
		s.e.worker.Unreserve()
		return
	}
	s.e.engine.Begin(cr.Run.ID) // before Start returns, so Result need not read the store
	s.e.worker.Launch(cr)
}

func (e *embedded) startTx(ctx context.Context, tx any, def *definition, input []byte, o StartOptions) (*Run, error) {
	ts, ok := e.store.(store.TxStarter)
	if !ok {
		return nil, fmt.Errorf("starting %s: %w", def.name, ErrTxNotSupported)
	}
	res, err := ts.RunCreateTx(ctx, tx, e.createParams(ctx, def, input, o))
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", def.name, err)
	}
	return runFromStore(res.Run), nil
}

// startMany is StartMany on the client's own store.
func (e *embedded) startMany(ctx context.Context, reqs []StartRequest) ([]StartResult, error) {
	p := &store.RunsCreateParams{Namespace: e.cfg.Namespace, Runs: make([]*store.RunCreateParams, len(reqs))}
	for i, r := range reqs {
		def, err := e.checkStart(r.Workflow, r.Input)
		if err == nil {
			err = checkVersion(r.Options)
		}
		if err != nil {
			return nil, fmt.Errorf("starting runs: item %d: %w", i, err)
		}
		p.Runs[i] = e.createParams(ctx, def, r.Input, r.Options)
		if err := e.applyRecords(ctx, def, r.Options, p.Runs[i]); err != nil {
			return nil, fmt.Errorf("starting runs: item %d: %w", i, err)
		}
	}
	p.Idempotency = e.idempotency("startedMany")
	slots, cctx, cancel := e.claimSlots(ctx, p.Runs...)
	defer cancel()
	// The waits for these runs need not read them as they register: the
	// results watcher learns of their creation (results.Watcher.Created).
	rw := e.lastingWatcher()
	var mark uint64
	if rw != nil {
		mark = rw.Mark()
	}
	res, err := e.store.RunsCreate(cctx, p)
	if rw != nil {
		var created []string
		if err == nil {
			created = make([]string, 0, len(res.Items))
			for _, it := range res.Items {
				if it.Created && it.Claimed == nil { // a run this worker runs: its Outcome
					created = append(created, it.Run.ID)
				}
			}
		}
		rw.Created(created, mark)
	}
	handOver(slots, err, func(i int) *store.ClaimedRun {
		if i < len(res.Items) { // a store that answered fewer items leaves the rest unclaimed
			return res.Items[i].Claimed
		}
		return nil
	})
	if lapsed(ctx, cctx, err) {
		res, err = e.finishManyUnclaimed(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("starting runs: %w", err)
	}
	return startResults(res), nil
}

// checkStart checks a start by name as StartRaw does and returns the
// workflow's definition (a bare one when this client does not know it).
func (e *embedded) checkStart(workflow string, input []byte) (*definition, error) {
	if workflow == "" {
		return nil, fmt.Errorf("%w: empty workflow name", ErrInvalidParams)
	}
	if len(input) > e.cfg.MaxPayloadBytes {
		return nil, fmt.Errorf("%w: input is %d bytes (limit %d)", ErrPayloadTooLarge, len(input), e.cfg.MaxPayloadBytes)
	}
	def, ok := e.reg.get(workflow)
	if !ok {
		return &definition{name: workflow}, nil
	}
	if err := def.checkIn(e.cfg.Codec, input); err != nil {
		return nil, err
	}
	return def, nil
}

func (e *embedded) reset(ctx context.Context, ref, step string) (*Run, error) {
	src, err := e.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if !src.Status.Terminal() {
		return nil, fmt.Errorf("resetting run %s: %w (status %s)", src.ID, ErrRunActive, src.Status)
	}
	history, err := e.store.HistoryList(ctx, &store.HistoryListParams{Namespace: e.cfg.Namespace, Ref: src.ID})
	if err != nil {
		return nil, fmt.Errorf("resetting run %s: %w", src.ID, err)
	}
	kept, kv, err := resetPrefix(history, step)
	if err == nil {
		err = e.checkNoMap(ctx, src, kept)
	}
	if err != nil {
		return nil, fmt.Errorf("resetting run %s: %w", src.ID, err)
	}
	res, err := e.store.RunCreate(ctx, &store.RunCreateParams{
		Namespace: e.cfg.Namespace, ID: uuid.Must(uuid.NewV7()).String(), WorkflowID: src.WorkflowID,
		Workflow: src.Workflow, Queue: src.Queue, Priority: src.Priority, Version: src.Version, Pinned: src.Pinned,
		Input: src.Input, History: kept, KV: kv, Idempotency: e.idempotency("createdRun"),
		Retry: src.Retry, // its start's workflow retry policy; the new run is at its first attempt
	})
	if err != nil {
		return nil, fmt.Errorf("resetting run %s: %w", src.ID, err)
	}
	return runFromStore(res.Run), nil
}

// checkNoMap refuses to keep a Map's op that does not hold its items' results
// (recorded before Map ops did): those are read from its child runs, which
// belong to the old run. (A single child's result is in its op.)
func (e *embedded) checkNoMap(ctx context.Context, src *Run, kept []*store.Op) error {
	for _, op := range kept {
		if op.Kind != store.OpChild {
			continue
		}
		runs, err := e.store.RunChildren(ctx, &store.RunChildrenParams{Namespace: src.Namespace, Parent: src.ID, Position: op.Position})
		if err != nil {
			return err
		}
		if len(runs) > 0 && runs[0].ID == engine.ChildRunID(src.ID, op.Position, 0) && !engine.MapSelfContained(op) {
			return fmt.Errorf("%w: op %d is a Map recorded by an older version, whose results stay with the old run: reset to a step before it",
				ErrInvalidParams, op.Position)
		}
	}
	return nil
}
