package storetest

import (
	"context"

	"github.com/trellis-dev/trellis/store"
)

// WorkerRole is the worker role of the contract and the registry through
// which workers record themselves: what a remote worker client implements.
type WorkerRole interface {
	store.WorkerStore
	store.WorkerRegistry
}

// WithWorker returns st with every call of the worker role (WorkerStore and
// WorkerRegistry, Subscribe included) made through w instead, and every other
// call (setup, clients, admin) made on st. A client that implements only the
// worker role, such as the remote worker client of store/storeremote, runs the
// whole suite unchanged this way: Run(t, func(...) store.Store { return
// WithWorker(backend, remote) }), with backend the store the server serves.
// The optional transactional capabilities (store.TxCheckpointer ...) are not
// forwarded: their cases skip.
func WithWorker(st store.Store, w WorkerRole) store.Store {
	return &viaWorker{Store: st, w: w}
}

// WithHandedWorker is WithWorker for a worker that writes a lease only with the
// secret its server issued with the claim (store.ClaimedRun.LeaseSecret): the
// runs st creates claimed (RunCreate, RunsCreate and EventSend with a Claim, which a
// server does to hand a run to a waiting worker) are handed to the worker
// through hand, which gives them their secrets as the server would.
func WithHandedWorker(st store.Store, w WorkerRole, hand func(...*store.ClaimedRun)) store.Store {
	return &viaWorker{Store: st, w: w, hand: hand}
}

type viaWorker struct {
	store.Store
	w    WorkerRole
	hand func(...*store.ClaimedRun) // nil: claims are used as the store made them
}

func (v *viaWorker) RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	res, err := v.Store.RunCreate(ctx, p)
	if err == nil && res.Claimed != nil && v.hand != nil {
		v.hand(res.Claimed)
	}
	return res, err
}

func (v *viaWorker) RunsCreate(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	res, err := v.Store.RunsCreate(ctx, p)
	if err == nil && v.hand != nil {
		for _, it := range res.Items {
			if it.Claimed != nil {
				v.hand(it.Claimed)
			}
		}
	}
	return res, err
}

func (v *viaWorker) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	res, err := v.Store.EventSend(ctx, p)
	if err == nil && res.Claimed != nil && v.hand != nil {
		v.hand(res.Claimed)
	}
	return res, err
}

func (v *viaWorker) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	return v.w.RunsClaim(ctx, p)
}

func (v *viaWorker) LeasesExtend(ctx context.Context, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	return v.w.LeasesExtend(ctx, p)
}

func (v *viaWorker) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	return v.w.LeaseRelease(ctx, p)
}

func (v *viaWorker) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	return v.w.Checkpoint(ctx, p)
}

func (v *viaWorker) RunsResumeBlocked(ctx context.Context, p *store.RunsResumeBlockedParams) (int, error) {
	return v.w.RunsResumeBlocked(ctx, p)
}

func (v *viaWorker) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	return v.w.HistoryList(ctx, p)
}

func (v *viaWorker) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	return v.w.RunChildren(ctx, p)
}

func (v *viaWorker) Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error) {
	return v.w.Subscribe(ctx, topic)
}

func (v *viaWorker) WorkerHeartbeat(ctx context.Context, p *store.WorkerHeartbeatParams) error {
	return v.w.WorkerHeartbeat(ctx, p)
}

func (v *viaWorker) WorkerList(ctx context.Context, p *store.WorkerListParams) ([]*store.Worker, error) {
	return v.w.WorkerList(ctx, p)
}

func (v *viaWorker) WorkerRemove(ctx context.Context, p *store.WorkerRemoveParams) error {
	return v.w.WorkerRemove(ctx, p)
}
