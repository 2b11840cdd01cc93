package storepg

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// The plain run creates of a batch (the default reuse policy, no seeded history,
// no idempotency key: what Start sends) are one statement, as its checkpoints
// are: one INSERT of every new run from column arrays instead of one INSERT per
// run (w1 at n = 5,000 spent 66 µs of server time per run on its own INSERT, and
// 10 µs more binding it). ON CONFLICT DO NOTHING leaves out the runs whose ID or
// active workflow ID is taken, by an older run or an earlier one of the batch, as
// one statement per run would have: those get ErrRunExists (implicitFree adds
// the part of the rule that index leaves out). A run ID that appears
// twice in a batch goes to a statement of its own (the rows come back by ID).
// OFFSET 0 keeps the planner from copying the queue's subquery into each of the
// six CASEs that read it: it was planned and run six times per run, and planning
// the statement took 0.4 ms.
var (
	sqlRunCreates      = runCreatesSQL(false)
	sqlRunCreatesKeyed = runCreatesSQL(true)
)

// runCreatesSQL is sqlRunCreates or, keyed, its variant for the keyed creator's
// pipelined batches (see keyedcreate.go): one more column array, $22, the
// creates' idempotency keys, and a run is inserted only when the same
// transaction inserted (or took over) its key, which its row's xmin tells.
func runCreatesSQL(keyed bool) string {
	keyArg, keyCol, keyCond := "", "", ""
	if keyed {
		keyArg, keyCol = ", $22::text[]", ", ikey"
		keyCond = " AND " + keyInsertedHere("x.ns", "x.ikey")
	}
	return runInsertCols + `
	SELECT x.ns, x.id, x.workflow_id, x.workflow, x.queue, x.priority,
		CASE WHEN q.restricted THEN 'pending' ELSE x.status END,
		CASE WHEN q.restricted THEN 0 ELSE x.attempts END,
		CASE WHEN q.restricted THEN '' ELSE x.owner END,
		CASE WHEN q.restricted THEN 0 ELSE x.token END,
		CASE WHEN q.restricted THEN NULL ELSE x.expires END,
		CASE WHEN q.restricted THEN NULL ELSE x.started END,
		x.version, x.input, x.deadline, x.avail, x.now, x.now, x.ckey, x.trace_parent, x.pin, x.retry
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], $7::int4[],
		$8::bytea[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::int4[],
		$14::text[], $15::int8[], $16::timestamptz[], $17::timestamptz[], $18::text[], $19::text[], $20::int4[], $21::text[]` + keyArg + `)
		AS x(ns, id, workflow_id, workflow, queue, priority, version, input, deadline, avail, now,
			status, attempts, owner, token, expires, started, ckey, trace_parent, pin, retry` + keyCol + `)
	CROSS JOIN LATERAL (SELECT x.status = 'running' AND EXISTS (SELECT 1 FROM queues q
		WHERE q.namespace = x.ns AND q.name = x.queue AND ` + sqlstore.Restricted + `) AS restricted OFFSET 0) q
	WHERE ` + implicitFree("x.ns", "x.id", "x.workflow_id") + keyCond + `
	ON CONFLICT DO NOTHING RETURNING true, ` + runCols
}

// crReq is a plain run create the writer may merge with others (see sqlRunCreates).
type crReq struct {
	p          *store.RunCreateParams
	now, avail time.Time
	claim      *newClaim
	// res is set by the statement's reader: nil when the start was rejected.
	res **store.RunCreateResult
	// single is the create as a statement of its own.
	single stmt
}

// mergeable reports whether a create can join a merged statement.
func mergeable(p *store.RunCreateParams) bool {
	return p.Reuse == store.ReuseRejectActive && len(p.History) == 0 && p.Idempotency == nil
}

// keyedCreatesStmt is createsStmt for creates whose idempotency keys the same
// transaction recorded first (sqlRunCreatesKeyed): keys[i] is crs[i]'s key.
func keyedCreatesStmt(crs []*crReq, keys []string) stmt {
	st := createsStmt(crs)
	st.sql, st.args = sqlRunCreatesKeyed, append(st.args, keys)
	return st
}

// createsStmt merges creates crs (distinct run IDs) into one statement whose
// reader sets each one's res.
func createsStmt(crs []*crReq) stmt {
	n := len(crs)
	var (
		ns, id, wid, wf, queue, status, owner, ckey, tp = make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		priority, version, attempts, pin    = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		input                               = make([][]byte, n)
		deadline, avail, now, expires, strt = make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n),
			make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
		token = make([]int64, n)
		retry = make([]pgtype.Text, n)
	)
	byID := make(map[string]*crReq, n)
	for i, c := range crs {
		p := c.p
		ns[i], id[i], wid[i], wf[i], queue[i] = p.Namespace, p.ID, p.WorkflowID, p.Workflow, p.Queue
		priority[i], version[i], input[i], pin[i] = int32(p.Priority), int32(p.Version), p.Input, pinArg(p)
		deadline[i], avail[i], now[i] = tsArg(timePtrArg(p.Deadline)), tsArg(&c.avail), tsArg(&c.now)
		ckey[i], tp[i] = p.ConcurrencyKey, p.TraceParent
		if col, _ := store.RetryColumn(p.Retry); col != nil { // valid: checked by runCreateStmt
			retry[i] = pgtype.Text{String: col.(string), Valid: true}
		}
		status[i] = string(store.StatusPending)
		if cl := c.claim; cl != nil {
			status[i], attempts[i], owner[i], token[i] = string(store.StatusRunning), 1, cl.worker, cl.token
			expires[i], strt[i] = tsArg(&cl.expires), tsArg(&cl.started)
		}
		byID[p.Namespace+"\x00"+p.ID] = c
	}
	return stmt{
		sql: sqlRunCreates,
		args: []any{ns, id, wid, wf, queue, priority, version, input, deadline, avail, now,
			status, attempts, owner, token, expires, strt, ckey, tp, pin, retry},
		rows: func(rows pgx.Rows) error {
			for _, c := range crs {
				*c.res = nil
			}
			for rows.Next() {
				var created bool
				run, token, err := scanRun(prefixed{rows, []any{&created}})
				if err != nil {
					return err
				}
				c := byID[run.Namespace+"\x00"+run.ID]
				if c == nil {
					continue
				}
				res := &store.RunCreateResult{Run: run, Created: created}
				if c.claim != nil && run.Status == store.StatusRunning && run.LeaseExpiresAt != nil {
					res.Claimed = &store.ClaimedRun{Run: run, LeaseToken: token, LeaseExpiresAt: *run.LeaseExpiresAt,
						History: []*store.Op{}, Inbox: []*store.Event{}}
				}
				*c.res = res
			}
			return rows.Err()
		},
	}
}
