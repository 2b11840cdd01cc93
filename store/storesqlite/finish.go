package storesqlite

import (
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// finish is a checkpoint that does nothing but end its run: a job's outcome,
// most often (one claim, one execution, one completion write). The writer ends
// the runs of a batch's finishes with one statement (finishMany) instead of one
// each; res receives the checkpoint's result however it was applied.
type finish struct {
	p       *store.CheckpointParams
	errText any
	res     *store.CheckpointResult
}

// onlyFinishes reports whether p ends its run and writes nothing else. A
// failure is not one: a workflow retry may make it a wait (retry.go).
func onlyFinishes(p *store.CheckpointParams) bool {
	return p.Status.Terminal() && p.Status != store.StatusFailed && len(p.Ops) == 0 && len(p.Attempts) == 0 && len(p.KV) == 0 &&
		len(p.Stream) == 0 && len(p.WaitEvents) == 0 && len(p.NoEvents) == 0 && len(p.Consume) == 0 &&
		len(p.Children) == 0 && len(p.Approvals) == 0 && len(p.ExpireApprovals) == 0
}

// finishCols is the number of parameters of one finish in sqlFinishes (one
// more in sqlFinishesBySeq: the run's sequence, first).
const finishCols = 8

// sqlFinishes is the statement that ends the runs of up to n finishes (n a
// power of two from 2 to maxFinishes, so that a few prepared statements serve
// every batch), each fenced as sqlCkFinished is: its rows are the parameters of
// each finish, in order, then now twice; rows past the finishes of a batch are
// NULLs, which match no run. It returns the runs it ended, with their place in
// a parent's group. The runs are found through runs_namespace_id, one probe per
// row. The parameters are anonymous: the driver looks up the name of each
// numbered one in a list as long as the statement's, which for a thousand
// parameters cost more than the statement itself.
//
// sqlFinishesBySeq is the same for finishes whose leases carry their run's
// sequence (store.Lease.RunSeq: every lease a claim of this store made): it
// finds each run by its rowid, without the probe of runs_namespace_id (one
// B-tree descent of a key of two strings fewer per job), and still checks the
// namespace and ID, so that a wrong sequence matches nothing and its finish is
// applied on its own, as a stale one is.
var sqlFinishes, sqlFinishesBySeq = finishesSQL(false), finishesSQL(true)

func finishesSQL(bySeq bool) map[int]string {
	cols, row, bySeqCond := "ns, id, token, seq, fp, status, output, error", "(?, ?, ?, ?, ?, ?, ?, ?)", ""
	if bySeq {
		cols, row, bySeqCond = "rseq, "+cols, "(?, ?, ?, ?, ?, ?, ?, ?, ?)", "runs.sequence = v.rseq AND "
	}
	m := map[int]string{}
	for n := 2; n <= maxFinishes; n *= 2 {
		rows := strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
		m[n] = `WITH v(` + cols + `) AS (VALUES ` + rows + `)
	UPDATE OR FAIL runs SET status = v.status, output = v.output, error = v.error, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = ?, updated_at = ?,
	lease_seq = CASE WHEN v.seq = 0 THEN runs.lease_seq ELSE v.seq END,
	lease_fp = CASE WHEN v.seq = 0 THEN runs.lease_fp ELSE v.fp END
	FROM v WHERE ` + bySeqCond + `runs.namespace = v.ns AND runs.id = v.id AND runs.status = 'running'
	AND runs.lease_token = v.token AND (v.seq = 0 OR runs.lease_seq < v.seq)
	RETURNING namespace, id, sequence, cancel_requested, parent_seq, parent_position`
	}
	return m
}

// finishMany applies the finishes among batch's live requests, when there are
// several, with one statement per maxFinishes of them, and marks the requests
// it applied (r.applied). A finish whose fence matched no row (a stale lease,
// a retry) is left to the request's own apply, which finds out why. It reports
// false when something failed: the batch must be rolled back and replayed.
func (w *writer) finishMany(batch []*request) bool {
	var fins []*request
	byRun := map[runRef]*request{}
	for _, r := range batch {
		if r.fin == nil || r.ctx.Err() != nil {
			continue
		}
		// A second write to the same run (a retry sent while the first was
		// queued) is left to its own apply, which tells a retry from a conflict.
		if k := refOf(r.fin.p.Lease); byRun[k] == nil {
			byRun[k] = r
			fins = append(fins, r)
		}
	}
	if len(fins) < 2 {
		return true
	}
	for len(fins) > 0 {
		n := min(len(fins), maxFinishes)
		if !w.finishChunk(fins[:n], byRun) {
			return false
		}
		fins = fins[n:]
	}
	return true
}

// runRef identifies the run a lease is on.
type runRef struct{ namespace, id string }

func refOf(l store.Lease) runRef { return runRef{l.Namespace, l.RunID} }

// maxFinishes is the most finishes one statement ends.
const maxFinishes = 256

// finishChunk applies up to maxFinishes finishes with one statement, padded to a
// power of two rows (see sqlFinishes), then counts the children among the runs
// it ended in their groups; byRun finds the request of a run the statement
// ended. It reports false as finishMany does.
func (w *writer) finishChunk(reqs []*request, byRun map[runRef]*request) bool {
	n := 2
	for n < len(reqs) {
		n *= 2
	}
	tx := &wtx{w: w, now: w.s.now().UTC()}
	query, cols, bySeq := sqlFinishes[n], finishCols, true
	for _, r := range reqs {
		bySeq = bySeq && r.fin.p.Lease.RunSeq > 0
	}
	if bySeq {
		query, cols = sqlFinishesBySeq[n], finishCols+1
	}
	args := make([]any, n*cols+2)
	args[n*cols], args[n*cols+1] = tx.now.UnixNano(), tx.now.UnixNano()
	for i, r := range reqs {
		p := r.fin.p
		a := args[i*cols:]
		if bySeq {
			a[0], a = p.Lease.RunSeq, a[1:]
		}
		a[0], a[1], a[2], a[3], a[4] = p.Lease.Namespace, p.Lease.RunID, p.Lease.Token, p.Seq, p.Fingerprint
		a[5], a[6], a[7] = string(p.Status), blob(p.Output), r.fin.errText
	}
	rows, err := tx.query(query, args...)
	if err != nil {
		w.failFinishes(reqs, err)
		return false
	}
	type ended struct {
		r  *request
		ck ckRow
	}
	var done []ended
	for rows.Next() {
		var (
			ref runRef
			ck  ckRow
		)
		if err := rows.Scan(&ref.namespace, &ref.id, &ck.seq, &ck.cancel, &ck.parentSeq, &ck.position); err != nil {
			_ = rows.Close()
			w.failFinishes(reqs, err)
			return false
		}
		if r := byRun[ref]; r != nil {
			done = append(done, ended{r, ck})
		}
	}
	if err := rows.Close(); err != nil {
		w.failFinishes(reqs, err)
		return false
	}
	for _, e := range done {
		etx := &wtx{w: w, now: tx.now}
		res, err := checkpointed(etx, e.ck, e.r.fin.p) // an ended child is counted in its group
		if err != nil {
			e.r.err = err
			return false
		}
		e.r.topics, e.r.applied, e.r.fin.res = etx.topics, true, res
	}
	return true
}

// failFinishes records a failed merged statement as the error of its first
// request (the others get theirs when the batch is replayed one by one).
func (w *writer) failFinishes(reqs []*request, err error) {
	if diskError(err) {
		w.writeFailed()
	}
	reqs[0].err = err
}
