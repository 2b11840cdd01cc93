package storesqlite

import "github.com/trellis-dev/trellis/store"

// createApprovals inserts a checkpoint's approval requests. A taken ID fails with
// store.ErrInvalidParams after writing: the request is dirty, so the batch is
// replayed with savepoints and nothing of the checkpoint remains.
func createApprovals(tx *wtx, namespace string, runSeq int64, reqs []*store.ApprovalRequest) error {
	return shared.CreateApprovals(tx, namespace, runSeq, reqs)
}

// expireApprovals marks the run's pending approvals of ids expired.
func expireApprovals(tx *wtx, runSeq int64, ids []string) error {
	return shared.ExpireApprovals(tx, runSeq, ids)
}
