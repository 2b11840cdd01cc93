package storepg

import (
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// Approvals are written once, in sqlstore; a checkpoint pipelines the statements
// that create and expire them (writeCheckpoint).

// approvalCheck maps the unique violation of an approval's insert to
// sqlstore.ApprovalTaken.
func approvalCheck(id string) func(pgconn.CommandTag, error) error {
	return func(_ pgconn.CommandTag, err error) error {
		if isUniqueViolation(err) {
			return sqlstore.ApprovalTaken(id)
		}
		return err
	}
}
