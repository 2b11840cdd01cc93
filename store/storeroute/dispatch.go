package storeroute

import (
	"context"

	"github.com/trellis-dev/trellis/store"
)

// The calls of one namespace: each goes, whole, to the store that holds it.

// RunsClaim implements store.WorkerStore.
func (r *router) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	return r.storeFor(p.Namespace).RunsClaim(ctx, p)
}

// LeaseRelease implements store.WorkerStore.
func (r *router) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	return r.storeFor(p.Lease.Namespace).LeaseRelease(ctx, p)
}

// Checkpoint implements store.WorkerStore.
func (r *router) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	return r.storeFor(p.Lease.Namespace).Checkpoint(ctx, p)
}

// RunsResumeBlocked implements store.WorkerStore.
func (r *router) RunsResumeBlocked(ctx context.Context, p *store.RunsResumeBlockedParams) (int, error) {
	return r.storeFor(p.Namespace).RunsResumeBlocked(ctx, p)
}

// HistoryList implements store.WorkerStore and store.RunStore.
func (r *router) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	return r.storeFor(p.Namespace).HistoryList(ctx, p)
}

// RunChildren implements store.WorkerStore and store.RunStore.
func (r *router) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	return r.storeFor(p.Namespace).RunChildren(ctx, p)
}

// RunCreate implements store.RunStore.
func (r *router) RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	return r.storeFor(p.Namespace).RunCreate(ctx, p)
}

// RunsCreate implements store.BatchCreator.
func (r *router) RunsCreate(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	return r.storeFor(p.Namespace).RunsCreate(ctx, p)
}

// RunGet implements store.RunStore.
func (r *router) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	return r.storeFor(p.Namespace).RunGet(ctx, p)
}

// RunsGet implements store.RunStore.
func (r *router) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	return r.storeFor(p.Namespace).RunsGet(ctx, p)
}

// RunList implements store.RunStore.
func (r *router) RunList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	return r.storeFor(p.Namespace).RunList(ctx, p)
}

// RunCancel implements store.RunStore.
func (r *router) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	return r.storeFor(p.Namespace).RunCancel(ctx, p)
}

// RunResume implements store.RunStore.
func (r *router) RunResume(ctx context.Context, p *store.RunResumeParams) (*store.Run, error) {
	return r.storeFor(p.Namespace).RunResume(ctx, p)
}

// KVGet implements store.RunStore.
func (r *router) KVGet(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	return r.storeFor(p.Namespace).KVGet(ctx, p)
}

// StreamRead implements store.RunStore.
func (r *router) StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	return r.storeFor(p.Namespace).StreamRead(ctx, p)
}

// EventSend implements store.EventStore.
func (r *router) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	return r.storeFor(p.Namespace).EventSend(ctx, p)
}

// ApprovalGet implements store.ApprovalStore.
func (r *router) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	return r.storeFor(p.Namespace).ApprovalGet(ctx, p)
}

// ApprovalList implements store.ApprovalStore.
func (r *router) ApprovalList(ctx context.Context, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	return r.storeFor(p.Namespace).ApprovalList(ctx, p)
}

// ApprovalDecide implements store.ApprovalStore.
func (r *router) ApprovalDecide(ctx context.Context, p *store.ApprovalDecideParams) (*store.Approval, error) {
	return r.storeFor(p.Namespace).ApprovalDecide(ctx, p)
}

// WorkerHeartbeat implements store.WorkerRegistry.
func (r *router) WorkerHeartbeat(ctx context.Context, p *store.WorkerHeartbeatParams) error {
	return r.storeFor(p.Namespace).WorkerHeartbeat(ctx, p)
}

// WorkerList implements store.WorkerRegistry.
func (r *router) WorkerList(ctx context.Context, p *store.WorkerListParams) ([]*store.Worker, error) {
	return r.storeFor(p.Namespace).WorkerList(ctx, p)
}

// WorkerRemove implements store.WorkerRegistry.
func (r *router) WorkerRemove(ctx context.Context, p *store.WorkerRemoveParams) error {
	return r.storeFor(p.Namespace).WorkerRemove(ctx, p)
}

// IdempotencyGet implements store.IdempotencyStore.
func (r *router) IdempotencyGet(ctx context.Context, p *store.IdempotencyGetParams) (*store.IdempotencyEntry, error) {
	return r.storeFor(p.Namespace).IdempotencyGet(ctx, p)
}

// NamespaceCreate implements store.QueueStore.
func (r *router) NamespaceCreate(ctx context.Context, p *store.NamespaceCreateParams) (*store.Namespace, error) {
	return r.storeFor(p.Name).NamespaceCreate(ctx, p)
}

// NamespaceGet implements store.QueueStore.
func (r *router) NamespaceGet(ctx context.Context, p *store.NamespaceGetParams) (*store.Namespace, error) {
	return r.storeFor(p.Name).NamespaceGet(ctx, p)
}

// NamespaceUpdate implements store.QueueStore.
func (r *router) NamespaceUpdate(ctx context.Context, p *store.NamespaceUpdateParams) (*store.Namespace, error) {
	return r.storeFor(p.Name).NamespaceUpdate(ctx, p)
}

// QueueCreate implements store.QueueStore.
func (r *router) QueueCreate(ctx context.Context, p *store.QueueCreateParams) (*store.Queue, error) {
	return r.storeFor(p.Namespace).QueueCreate(ctx, p)
}

// QueueGet implements store.QueueStore.
func (r *router) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.Queue, error) {
	return r.storeFor(p.Namespace).QueueGet(ctx, p)
}

// QueueList implements store.QueueStore.
func (r *router) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.Queue, error) {
	return r.storeFor(p.Namespace).QueueList(ctx, p)
}

// QueueUpdate implements store.QueueStore.
func (r *router) QueueUpdate(ctx context.Context, p *store.QueueUpdateParams) (*store.Queue, error) {
	return r.storeFor(p.Namespace).QueueUpdate(ctx, p)
}

// QueueSetPaused implements store.QueueStore.
func (r *router) QueueSetPaused(ctx context.Context, p *store.QueueSetPausedParams) (*store.Queue, error) {
	return r.storeFor(p.Namespace).QueueSetPaused(ctx, p)
}

// RunDelete implements store.RunDeleter.
func (r *router) RunDelete(ctx context.Context, p *store.RunDeleteParams) (*store.Run, error) {
	return r.storeFor(p.Namespace).RunDelete(ctx, p)
}

// RunsPurge implements store.RunDeleter.
func (r *router) RunsPurge(ctx context.Context, p *store.RunsPurgeParams) (int, error) {
	return r.storeFor(p.Namespace).RunsPurge(ctx, p)
}

// ScheduleCreate implements store.ScheduleStore.
func (r *router) ScheduleCreate(ctx context.Context, p *store.ScheduleCreateParams) (*store.Schedule, error) {
	return r.storeFor(p.Namespace).ScheduleCreate(ctx, p)
}

// ScheduleGet implements store.ScheduleStore.
func (r *router) ScheduleGet(ctx context.Context, p *store.ScheduleGetParams) (*store.Schedule, error) {
	return r.storeFor(p.Namespace).ScheduleGet(ctx, p)
}

// ScheduleUpdate implements store.ScheduleStore.
func (r *router) ScheduleUpdate(ctx context.Context, p *store.ScheduleUpdateParams) (*store.Schedule, error) {
	return r.storeFor(p.Namespace).ScheduleUpdate(ctx, p)
}

// SchedulePause implements store.ScheduleStore.
func (r *router) SchedulePause(ctx context.Context, p *store.SchedulePauseParams) (*store.Schedule, error) {
	return r.storeFor(p.Namespace).SchedulePause(ctx, p)
}

// ScheduleDelete implements store.ScheduleStore.
func (r *router) ScheduleDelete(ctx context.Context, p *store.ScheduleDeleteParams) error {
	return r.storeFor(p.Namespace).ScheduleDelete(ctx, p)
}

// The calls of the control store: what belongs to no namespace.

// TokenCreate implements store.TokenStore.
func (r *router) TokenCreate(ctx context.Context, p *store.TokenCreateParams) (*store.Token, error) {
	return r.control.TokenCreate(ctx, p)
}

// TokenByHash implements store.TokenStore.
func (r *router) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	return r.control.TokenByHash(ctx, p)
}

// TokenBySubject implements store.TokenStore.
func (r *router) TokenBySubject(ctx context.Context, p *store.TokenBySubjectParams) (*store.Token, error) {
	return r.control.TokenBySubject(ctx, p)
}

// TokenList implements store.TokenStore.
func (r *router) TokenList(ctx context.Context) ([]*store.Token, error) {
	return r.control.TokenList(ctx)
}

// TokenRevoke implements store.TokenStore.
func (r *router) TokenRevoke(ctx context.Context, p *store.TokenRevokeParams) (*store.Token, error) {
	return r.control.TokenRevoke(ctx, p)
}

// TokenRotate implements store.TokenStore.
func (r *router) TokenRotate(ctx context.Context, p *store.TokenRotateParams) (*store.Token, error) {
	return r.control.TokenRotate(ctx, p)
}

// TokenTouch implements store.TokenStore.
func (r *router) TokenTouch(ctx context.Context, p *store.TokenTouchParams) error {
	return r.control.TokenTouch(ctx, p)
}

// SecretKey implements store.KeyStore.
func (r *router) SecretKey(ctx context.Context, p *store.SecretKeyParams) ([]byte, error) {
	return r.control.SecretKey(ctx, p)
}

// AuditAppend implements store.AuditStore.
func (r *router) AuditAppend(ctx context.Context, p *store.AuditAppendParams) error {
	return r.control.AuditAppend(ctx, p)
}

// AuditList implements store.AuditStore.
func (r *router) AuditList(ctx context.Context, p *store.AuditListParams) (*store.AuditListResult, error) {
	return r.control.AuditList(ctx, p)
}

// AuditPurge implements store.AuditStore.
func (r *router) AuditPurge(ctx context.Context, p *store.AuditPurgeParams) (int, error) {
	return r.control.AuditPurge(ctx, p)
}

// AuditNamespaces implements store.AuditStore.
func (r *router) AuditNamespaces(ctx context.Context) ([]string, error) {
	return r.control.AuditNamespaces(ctx)
}

// SessionEnd implements store.SessionStore.
func (r *router) SessionEnd(ctx context.Context, p *store.SessionEndParams) error {
	return r.control.SessionEnd(ctx, p)
}

// SessionEnded implements store.SessionStore.
func (r *router) SessionEnded(ctx context.Context, p *store.SessionEndedParams) (bool, error) {
	return r.control.SessionEnded(ctx, p)
}

// SessionsPurge implements store.SessionStore.
func (r *router) SessionsPurge(ctx context.Context, p *store.SessionsPurgeParams) (int, error) {
	return r.control.SessionsPurge(ctx, p)
}
