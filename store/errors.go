package store

import (
	"errors"
	"fmt"
)

// Sentinel errors of the storage contract. Drivers return them (possibly wrapped) so
// callers can test with errors.Is; the root package re-exports them.
var (
	// ErrRunNotFound: no run matches the reference.
	ErrRunNotFound = errors.New("run not found")
	// ErrRunExists: the reuse policy rejected a start because a run with the same
	// workflow ID exists (and, by default, is still active).
	ErrRunExists = errors.New("a run with this workflow ID already exists")
	// ErrRunFinished: the run already reached a final state.
	ErrRunFinished = errors.New("run already finished")
	// ErrRunActive: the call needs a finished run (Reset, RunDelete) and the run
	// has not finished; cancel it first.
	ErrRunActive = errors.New("run is still active")
	// ErrRunNotBlocked: Resume was asked of a run that is not blocked.
	ErrRunNotBlocked = errors.New("run is not blocked")
	// ErrLeaseLost: the lease token is stale; the write was rejected.
	ErrLeaseLost = errors.New("lease lost: stale lease token")
	// ErrKeyNotFound: the run store has no such key.
	ErrKeyNotFound = errors.New("key not found")
	// ErrInvalidParams: a parameter is missing or malformed.
	ErrInvalidParams = errors.New("invalid parameters")
	// ErrConflict: a guarded checkpoint found an event it must not overlook
	// (CheckpointParams.NoEvents); nothing was written.
	ErrConflict = errors.New("conflict: the run's inbox changed")
	// ErrApprovalNotFound: no approval request has this ID.
	ErrApprovalNotFound = errors.New("approval not found")
	// ErrApprovalDecided: the approval request is no longer pending.
	ErrApprovalDecided = errors.New("approval already decided or expired")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrNoStore: a driver opened without migrating (NoMigrate) found no Trellis
	// store, or one that needs migrating, where it looked.
	ErrNoStore = errors.New("no Trellis store")
	// ErrWorkerOwned is returned by WorkerHeartbeat and WorkerRemove for a
	// worker record that another principal's worker made.
	ErrWorkerOwned = errors.New("worker record belongs to another principal")
	// ErrStorageFull: the store refuses new runs because its volume has too
	// little free space left for the runs that are running to finish (the
	// SQLite store's disk reserve); nothing was written. Runs already started
	// go on; starts succeed again once space is freed.
	ErrStorageFull = errors.New("storage full")
)

// Errors of the token store (TokenStore).
var (
	// ErrTokenExists: a token with this name (or hash) already exists.
	ErrTokenExists = errors.New("a token with this name already exists")
	// ErrTokenNotFound: no live token matches (unknown name or hash, or revoked).
	ErrTokenNotFound = errors.New("token not found")
	// ErrTokenInactive: the token is revoked or expired, so it cannot be rotated.
	ErrTokenInactive = errors.New("token revoked or expired")
)

// Errors of idempotency keys (IdempotencyStore).
var (
	// ErrIdempotencyKeyNotFound: no unexpired entry has this key.
	ErrIdempotencyKeyNotFound = errors.New("idempotency key not found")
	// ErrIdempotencyKeyUsed: a request with this key and the same fingerprint
	// executed already; nothing was written (read its response with
	// IdempotencyGet and replay it).
	ErrIdempotencyKeyUsed = errors.New("idempotency key already used by the same request")
	// ErrIdempotencyKeyConflict: the key was used by a different request;
	// nothing was written.
	ErrIdempotencyKeyConflict = errors.New("idempotency key already used by a different request")
)

// RunExistsError is ErrRunExists for a start with workflow ID workflowID that a
// unique index refused, when the driver does not know the run that holds the
// workflow ID. The run ID of the refused start is not named: it was generated
// for the start and never existed (a generated run ID does not collide; a
// workflow ID chosen by the caller often does), so the error says only that
// the workflow ID is taken.
func RunExistsError(_, workflowID string, reuse ReusePolicy) error {
	holder := "an active run"
	if reuse == ReuseReject {
		holder = "a run"
	}
	return fmt.Errorf("%w: %s has workflow ID %q%s", ErrRunExists, holder, workflowID, policyNote(reuse))
}

// WorkflowIDTakenError is ErrRunExists for a start that the reuse policy refused
// because run holder has workflow ID workflowID.
func WorkflowIDTakenError(workflowID, holder string, reuse ReusePolicy) error {
	return fmt.Errorf("%w: run %q has workflow ID %q%s", ErrRunExists, holder, workflowID, policyNote(reuse))
}

// policyNote names the reuse policy in an ErrRunExists that it decided, when it is
// not the default.
func policyNote(reuse ReusePolicy) string {
	if reuse == ReuseReject {
		return ` (reuse policy "reject")`
	}
	return ""
}

// RunNotFound is the error of a Ref that names no run in namespace.
func RunNotFound(namespace, ref string) error {
	return fmt.Errorf("%w: %q in namespace %q", ErrRunNotFound, ref, namespace)
}

// ApprovalNotFound is the error of an approval ID that names none in namespace.
func ApprovalNotFound(namespace, id string) error {
	return fmt.Errorf("%w: %q in namespace %q", ErrApprovalNotFound, id, namespace)
}
