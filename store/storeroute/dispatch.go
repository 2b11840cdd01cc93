package storeroute

import (
	"context"

	"github.com/trellis-dev/trellis/store"
)

// The calls of one namespace: each goes, whole, to the store that holds it.

// RunsClaim implements store.WorkerStore.
func (r *Router) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	return r.For(p.Namespace).RunsClaim(ctx, p)
}

// LeaseRelease implements store.WorkerStore.
func (r *Router) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	return r.For(p.Lease.Namespace).LeaseRelease(ctx, p)
}

// Checkpoint implements store.WorkerStore.
func (r *Router) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	return r.For(p.Lease.Namespace).Checkpoint(ctx, p)
}

// RunsResumeBlocked implements store.WorkerStore.
func (r *Router) RunsResumeBlocked(ctx context.Context, p *store.RunsResumeBlockedParams) (int, error) {
	return r.For(p.Namespace).RunsResumeBlocked(ctx, p)
}

// HistoryList implements store.WorkerStore and store.RunStore.
func (r *Router) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	return r.For(p.Namespace).HistoryList(ctx, p)
}

// RunChildren implements store.WorkerStore and store.RunStore.
func (r *Router) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	return r.For(p.Namespace).RunChildren(ctx, p)
}

// RunCreate implements store.RunStore.
func (r *Router) RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	return r.For(p.Namespace).RunCreate(ctx, p)
}

// RunsCreate implements store.BatchCreator.
func (r *Router) RunsCreate(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	return r.For(p.Namespace).RunsCreate(ctx, p)
}

// RunGet implements store.RunStore.
func (r *Router) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	return r.For(p.Namespace).RunGet(ctx, p)
}

// RunsGet implements store.RunStore.
func (r *Router) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	return r.For(p.Namespace).RunsGet(ctx, p)
}

// RunList implements store.RunStore.
func (r *Router) RunList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	return r.For(p.Namespace).RunList(ctx, p)
}

// RunCancel implements store.RunStore.
func (r *Router) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	return r.For(p.Namespace).RunCancel(ctx, p)
}

// RunResume implements store.RunStore.
func (r *Router) RunResume(ctx context.Context, p *store.RunResumeParams) (*store.Run, error) {
	return r.For(p.Namespace).RunResume(ctx, p)
}

// KVGet implements store.RunStore.
func (r *Router) KVGet(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	return r.For(p.Namespace).KVGet(ctx, p)
}

// StreamRead implements store.RunStore.
func (r *Router) StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	return r.For(p.Namespace).StreamRead(ctx, p)
}

// EventSend implements store.EventStore.
func (r *Router) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	return r.For(p.Namespace).EventSend(ctx, p)
}

// ApprovalGet implements store.ApprovalStore.
func (r *Router) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	return r.For(p.Namespace).ApprovalGet(ctx, p)
}

// ApprovalList implements store.ApprovalStore.
func (r *Router) ApprovalList(ctx context.Context, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	return r.For(p.Namespace).ApprovalList(ctx, p)
}

// ApprovalDecide implements store.ApprovalStore.
func (r *Router) ApprovalDecide(ctx context.Context, p *store.ApprovalDecideParams) (*store.Approval, error) {
	return r.For(p.Namespace).ApprovalDecide(ctx, p)
}

// WorkerHeartbeat implements store.WorkerRegistry.
func (r *Router) WorkerHeartbeat(ctx context.Context, p *store.WorkerHeartbeatParams) error {
	return r.For(p.Namespace).WorkerHeartbeat(ctx, p)
}

// WorkerList implements store.WorkerRegistry.
func (r *Router) WorkerList(ctx context.Context, p *store.WorkerListParams) ([]*store.Worker, error) {
	return r.For(p.Namespace).WorkerList(ctx, p)
}

// WorkerRemove implements store.WorkerRegistry.
func (r *Router) WorkerRemove(ctx context.Context, p *store.WorkerRemoveParams) error {
	return r.For(p.Namespace).WorkerRemove(ctx, p)
}

// IdempotencyGet implements store.IdempotencyStore.
func (r *Router) IdempotencyGet(ctx context.Context, p *store.IdempotencyGetParams) (*store.IdempotencyEntry, error) {
	return r.For(p.Namespace).IdempotencyGet(ctx, p)
}

// NamespaceCreate implements store.QueueStore.
func (r *Router) NamespaceCreate(ctx context.Context, p *store.NamespaceCreateParams) (*store.Namespace, error) {
	return r.For(p.Name).NamespaceCreate(ctx, p)
}

// NamespaceGet implements store.QueueStore.
func (r *Router) NamespaceGet(ctx context.Context, p *store.NamespaceGetParams) (*store.Namespace, error) {
	return r.For(p.Name).NamespaceGet(ctx, p)
}

// NamespaceUpdate implements store.QueueStore.
func (r *Router) NamespaceUpdate(ctx context.Context, p *store.NamespaceUpdateParams) (*store.Namespace, error) {
	return r.For(p.Name).NamespaceUpdate(ctx, p)
}

// QueueCreate implements store.QueueStore.
func (r *Router) QueueCreate(ctx context.Context, p *store.QueueCreateParams) (*store.Queue, error) {
	return r.For(p.Namespace).QueueCreate(ctx, p)
}

// QueueGet implements store.QueueStore.
func (r *Router) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.Queue, error) {
	return r.For(p.Namespace).QueueGet(ctx, p)
}

// QueueList implements store.QueueStore.
func (r *Router) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.Queue, error) {
	return r.For(p.Namespace).QueueList(ctx, p)
}

// QueueUpdate implements store.QueueStore.
func (r *Router) QueueUpdate(ctx context.Context, p *store.QueueUpdateParams) (*store.Queue, error) {
	return r.For(p.Namespace).QueueUpdate(ctx, p)
}

// QueueSetPaused implements store.QueueStore.
func (r *Router) QueueSetPaused(ctx context.Context, p *store.QueueSetPausedParams) (*store.Queue, error) {
	return r.For(p.Namespace).QueueSetPaused(ctx, p)
}

// RunDelete implements store.RunDeleter.
func (r *Router) RunDelete(ctx context.Context, p *store.RunDeleteParams) (*store.Run, error) {
	return r.For(p.Namespace).RunDelete(ctx, p)
}

// RunsPurge implements store.RunDeleter.
func (r *Router) RunsPurge(ctx context.Context, p *store.RunsPurgeParams) (int, error) {
	return r.For(p.Namespace).RunsPurge(ctx, p)
}

// ScheduleCreate implements store.ScheduleStore.
func (r *Router) ScheduleCreate(ctx context.Context, p *store.ScheduleCreateParams) (*store.Schedule, error) {
	return r.For(p.Namespace).ScheduleCreate(ctx, p)
}

// ScheduleGet implements store.ScheduleStore.
func (r *Router) ScheduleGet(ctx context.Context, p *store.ScheduleGetParams) (*store.Schedule, error) {
	return r.For(p.Namespace).ScheduleGet(ctx, p)
}

// ScheduleUpdate implements store.ScheduleStore.
func (r *Router) ScheduleUpdate(ctx context.Context, p *store.ScheduleUpdateParams) (*store.Schedule, error) {
	return r.For(p.Namespace).ScheduleUpdate(ctx, p)
}

// SchedulePause implements store.ScheduleStore.
func (r *Router) SchedulePause(ctx context.Context, p *store.SchedulePauseParams) (*store.Schedule, error) {
	return r.For(p.Namespace).SchedulePause(ctx, p)
}

// ScheduleDelete implements store.ScheduleStore.
func (r *Router) ScheduleDelete(ctx context.Context, p *store.ScheduleDeleteParams) error {
	return r.For(p.Namespace).ScheduleDelete(ctx, p)
}

// The calls of the control store: what belongs to no namespace.

// TokenCreate implements store.TokenStore.
func (r *Router) TokenCreate(ctx context.Context, p *store.TokenCreateParams) (*store.Token, error) {
	return r.control.TokenCreate(ctx, p)
}

// TokenByHash implements store.TokenStore.
func (r *Router) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	return r.control.TokenByHash(ctx, p)
}

// TokenBySubject implements store.TokenStore.
func (r *Router) TokenBySubject(ctx context.Context, p *store.TokenBySubjectParams) (*store.Token, error) {
	return r.control.TokenBySubject(ctx, p)
}

// TokenList implements store.TokenStore.
func (r *Router) TokenList(ctx context.Context) ([]*store.Token, error) {
	return r.control.TokenList(ctx)
}

// TokenRevoke implements store.TokenStore.
func (r *Router) TokenRevoke(ctx context.Context, p *store.TokenRevokeParams) (*store.Token, error) {
	return r.control.TokenRevoke(ctx, p)
}

// TokenRotate implements store.TokenStore.
func (r *Router) TokenRotate(ctx context.Context, p *store.TokenRotateParams) (*store.Token, error) {
	return r.control.TokenRotate(ctx, p)
}

// TokenTouch implements store.TokenStore.
func (r *Router) TokenTouch(ctx context.Context, p *store.TokenTouchParams) error {
	return r.control.TokenTouch(ctx, p)
}

// SecretKey implements store.KeyStore.
func (r *Router) SecretKey(ctx context.Context, p *store.SecretKeyParams) ([]byte, error) {
	return r.control.SecretKey(ctx, p)
}

// AuditAppend implements store.AuditStore.
func (r *Router) AuditAppend(ctx context.Context, p *store.AuditAppendParams) error {
	return r.control.AuditAppend(ctx, p)
}

// AuditList implements store.AuditStore.
func (r *Router) AuditList(ctx context.Context, p *store.AuditListParams) (*store.AuditListResult, error) {
	return r.control.AuditList(ctx, p)
}

// AuditPurge implements store.AuditStore.
func (r *Router) AuditPurge(ctx context.Context, p *store.AuditPurgeParams) (int, error) {
	return r.control.AuditPurge(ctx, p)
}

// AuditNamespaces implements store.AuditStore.
func (r *Router) AuditNamespaces(ctx context.Context) ([]string, error) {
	return r.control.AuditNamespaces(ctx)
}

// SessionEnd implements store.SessionStore.
func (r *Router) SessionEnd(ctx context.Context, p *store.SessionEndParams) error {
	return r.control.SessionEnd(ctx, p)
}

// SessionEnded implements store.SessionStore.
func (r *Router) SessionEnded(ctx context.Context, p *store.SessionEndedParams) (bool, error) {
	return r.control.SessionEnded(ctx, p)
}

// SessionsPurge implements store.SessionStore.
func (r *Router) SessionsPurge(ctx context.Context, p *store.SessionsPurgeParams) (int, error) {
	return r.control.SessionsPurge(ctx, p)
}
