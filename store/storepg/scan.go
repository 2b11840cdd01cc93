package storepg

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// runCols are the columns scanRun reads, in order.
const runCols = sqlstore.RunCols

// scanner is pgx.Row or pgx.Rows.
type scanner = sqlstore.Scanner

// scanRun reads runCols into a Run and returns it with its lease token.
func scanRun(sc scanner) (*store.Run, int64, error) { return sqlstore.ScanRun(sc) }

// refSeq is the sequence of the run a Ref ($2) names in namespace $1: the run with
// that ID, else the latest run with that workflow ID. NULL when none matches.
const refSeq = sqlstore.RefSeq

// seqOf is the sequence of the run (namespace ns, ID id). Fenced updates find their
// run through it rather than by "namespace = $1 AND id = $2 AND status = 'running'":
// with the latter, a generic plan (pgx prepares every statement) on a table without
// statistics may walk the partial index runs_running, i.e. every running run of the
// namespace, instead of the unique index (3 ms instead of 0.1 ms per checkpoint with
// 2,000 runs in flight).
func seqOf(ns, id string) string {
	return `(SELECT sequence FROM runs WHERE namespace = ` + ns + ` AND id = ` + id + `)`
}

// lockInOrder returns a query that locks the runs of the sequences query seqs
// selects, in sequence order, and returns their sequences; filter (empty, or
// "AND ...") leaves some of those runs out, and tail follows FOR UPDATE (empty,
// or "SKIP LOCKED"). Statements that update many running runs at once (a batch
// of checkpoints, a heartbeat's lease extensions) lock them through it first:
// each locking in the order its rows happened to come in, two of them could each
// hold a run the other waits for, a deadlock that Postgres breaks only after
// deadlock_timeout (1 s) by failing one. It did, about once per heartbeat under
// load. Statements that lock one run, or skip locked rows (claims, expiries),
// need no order.
func lockInOrder(seqs, filter, tail string) string {
	return `SELECT sequence FROM runs WHERE sequence = ANY(ARRAY(` + seqs + `)) ` + filter +
		`ORDER BY sequence FOR UPDATE ` + tail
}

// lockRowsInOrder is lockInOrder for many rows that each name a run, the
// runs of a heartbeat's lease extensions: it locks, in sequence order, the run
// of each row query rows selects (its column seq holds the run's sequence), and
// returns the rows whose run it locked, whole.
//
// Each run is locked by a lookup of its own, not by one index scan of
// "sequence = ANY(ARRAY(...))": a row that another transaction updated after
// the statement began is locked, then checked again (EvalPlanQual), which
// rescans the plan under the lock, and each rescan of an index scan on an array
// sorts the whole array again. A heartbeat's extension of 2,048 leases, beside
// the batches of checkpoints that update the same runs, spent 230 ms of its
// 340 in those sorts (w1 on Postgres, n = 20,000; 8% of the database's CPU).
// A batch of checkpoints (256 runs by default, Config.MaxBatch) keeps lockInOrder: its recheck
// sorts are small, and its update is planned from that scan's small estimate
// as a lookup of each locked run, where the planner given this query's true
// size read every running run instead.
func lockRowsInOrder(rows, seq, tail string) string {
	return `SELECT x.* FROM (` + rows + ` ORDER BY ` + seq + ` OFFSET 0) AS x
		CROSS JOIN LATERAL (SELECT FROM runs WHERE sequence = x.` + seq + ` FOR UPDATE ` + tail + `) AS l`
}

// timeArg encodes a time for a TIMESTAMPTZ parameter; the zero time is NULL.
func timeArg(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// timePtrArg encodes an optional time; nil and the zero time are NULL.
func timePtrArg(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	return t
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// errJSON encodes an optional ErrorInfo as JSON text (NULL when nil).
func errJSON(e *store.ErrorInfo) (*string, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding error info: %w", err)
	}
	s := string(b)
	return &s, nil
}

// isUniqueViolation reports a unique constraint failure.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// nonNil returns b, with nil as an empty slice (a key set to nothing still exists).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// runColsR is runCols qualified by the alias r.
var runColsR = "r." + strings.Join(strings.Fields(strings.ReplaceAll(runCols, ",", " ")), ", r.")

// suffixedInto scans extra trailing columns into dest after the ones scanRun reads.
type suffixedInto struct {
	sc   scanner
	rest []any
}

func (p suffixedInto) Scan(dest ...any) error { return p.sc.Scan(append(dest, p.rest...)...) }

// historyJSON is a scalar subquery returning the history of run seqExpr as a JSON
// array of ops in position order, each with its failed attempts: one query (or one
// column of a claim) however long the history.
func historyJSON(seqExpr string) string {
	return `(SELECT COALESCE(json_agg(json_build_object(
		'position', o.position, 'kind', o.kind, 'name', o.name, 'done', o.done,
		'result', encode(o.result, 'base64'), 'error', o.error::json, 'attempts', o.attempts,
		'started_at', o.started_at, 'finished_at', o.finished_at,
		'log', (SELECT json_agg(json_build_object('attempt', a.attempt, 'error', a.error::json,
				'started_at', a.started_at, 'finished_at', a.finished_at, 'outcome', a.outcome) ORDER BY a.attempt)
			FROM attempts a WHERE a.run_seq = o.run_seq AND a.position = o.position)
	) ORDER BY o.position), '[]') FROM ops o WHERE o.run_seq = ` + seqExpr + `)`
}

// opJSON is one element of historyJSON.
type opJSON struct {
	Position   int              `json:"position"`
	Kind       store.OpKind     `json:"kind"`
	Name       string           `json:"name"`
	Done       bool             `json:"done"`
	Result     []byte           `json:"result"` // base64 in JSON
	Error      *store.ErrorInfo `json:"error"`
	Attempts   int              `json:"attempts"`
	StartedAt  *time.Time       `json:"started_at"`
	FinishedAt *time.Time       `json:"finished_at"`
	Log        []struct {
		Attempt    int             `json:"attempt"`
		Error      store.ErrorInfo `json:"error"`
		StartedAt  *time.Time      `json:"started_at"`
		FinishedAt *time.Time      `json:"finished_at"`
		Outcome    string          `json:"outcome"`
	} `json:"log"`
}

// decodeHistory decodes the JSON of historyJSON.
func decodeHistory(b []byte) ([]*store.Op, error) {
	var raw []opJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("decoding history: %w", err)
	}
	ops := make([]*store.Op, 0, len(raw))
	for _, o := range raw {
		op := &store.Op{
			Position: o.Position, Kind: o.Kind, Name: o.Name, Done: o.Done, Result: o.Result,
			Error: o.Error, Attempts: o.Attempts, StartedAt: utc(o.StartedAt), FinishedAt: utcPtr(o.FinishedAt),
		}
		for _, a := range o.Log {
			at := store.Attempt{
				Position: o.Position, Attempt: a.Attempt, Error: a.Error,
				StartedAt: utc(a.StartedAt), FinishedAt: utc(a.FinishedAt), Outcome: a.Outcome,
			}
			at.NormalizeOutcome()
			op.AttemptLog = append(op.AttemptLog, at)
		}
		op.TakeSucceededAttempt()
		ops = append(ops, op)
	}
	return ops, nil
}
