package storesqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// What a claim writes for the step attempts of runs whose lease expired while
// they ran (store.RunsClaimResult.EndedAttempts). Only runs whose lease
// expired are read: a claim that takes back none reads and writes nothing more.
const (
	// sqlExpireLeasesReturning is sqlExpireLeases returning what the runs'
	// last heartbeats reported (current_step, under lease_token).
	sqlExpireLeasesReturning = sqlExpireLeases + ` RETURNING sequence, id, workflow, lease_token, current_step`
	// sqlEndedOp reads the op at a step's position and whether its attempt
	// has a row that is not a started one.
	sqlEndedOp = `SELECT (SELECT kind || '/' || name FROM ops WHERE run_seq = ?1 AND position = ?2),
	(SELECT done FROM ops WHERE run_seq = ?1 AND position = ?2),
	(SELECT attempts FROM ops WHERE run_seq = ?1 AND position = ?2),
	(SELECT outcome FROM attempts WHERE run_seq = ?1 AND position = ?2 AND attempt = ?3)`
	// sqlEndedOpUpsert gives the step its op, not done, with the ended attempt
	// counted.
	sqlEndedOpUpsert = `INSERT INTO ops (run_seq, position, kind, name, done, attempts, started_at)
	VALUES (?1, ?2, 'step', ?3, 0, ?4, ?5)
	ON CONFLICT (run_seq, position) DO UPDATE SET attempts = max(attempts, excluded.attempts) WHERE NOT done`
)

// expireLeases makes pending the running runs of namespace whose lease
// expired, and records the step attempt each was running, as its lease's last
// heartbeat reported it, as lost or timed out unless it completed.
func expireLeases(tx *wtx, namespace string, grace time.Duration) ([]store.EndedAttemptInfo, error) {
	now := tx.now.UnixNano()
	rows, err := tx.query(sqlExpireLeasesReturning, now, namespace)
	if err != nil {
		return nil, err
	}
	type expired struct {
		seq          int64
		id, workflow string
		step         *store.RunStep
	}
	var exp []expired
	for rows.Next() {
		var (
			e     expired
			token int64
			text  sql.NullString
		)
		if err := rows.Scan(&e.seq, &e.id, &e.workflow, &token, &text); err != nil {
			rows.Close()
			return nil, err
		}
		if text.Valid {
			if e.step = sqlstore.StepFromText(text.String, token); e.step != nil {
				exp = append(exp, e)
			}
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	var ended []store.EndedAttemptInfo
	for _, e := range exp {
		a, ok, err := endAttempt(tx, e.seq, e.step, grace)
		if err != nil {
			return nil, fmt.Errorf("recording attempt %d of op %d of run %s: %w", e.step.Attempt, e.step.Position, e.id, err)
		}
		if ok {
			ended = append(ended, store.EndedAttemptInfo{Namespace: namespace, RunID: e.id, Workflow: e.workflow,
				Position: a.Position, Attempt: a.Attempt, Outcome: a.Outcome})
		}
	}
	return ended, nil
}

// endAttempt records step attempt st of run seq as lost or timed out unless
// it completed: its op is done (or not that step: another kind or name, as a
// heartbeat without a position reports position 0), or it has a row other than
// a started one, or the op counts it and it has no started row.
func endAttempt(tx *wtx, seq int64, st *store.RunStep, grace time.Duration) (store.Attempt, bool, error) {
	var (
		kind, outcome sql.NullString
		done          sql.NullBool
		attempts      sql.NullInt64
	)
	if err := tx.queryRow(sqlEndedOp, seq, st.Position, st.Attempt).Scan(&kind, &done, &attempts, &outcome); err != nil {
		return store.Attempt{}, false, err
	}
	started := outcome.Valid && outcome.String == store.AttemptStarted
	switch {
	case kind.Valid && (kind.String != string(store.OpStep)+"/"+st.Name || done.Bool):
		return store.Attempt{}, false, nil
	case outcome.Valid && !started:
		return store.Attempt{}, false, nil
	case attempts.Valid && int(attempts.Int64) >= st.Attempt && !started:
		return store.Attempt{}, false, nil
	}
	a := st.EndedAttempt(tx.now, grace)
	e, err := errJSON(&a.Error)
	if err != nil {
		return a, false, err
	}
	if _, err := tx.exec(sqlAttemptUpsert, seq, a.Position, a.Attempt, e, ns(a.StartedAt), ns(a.FinishedAt), a.Outcome); err != nil {
		return a, false, err
	}
	if _, err := tx.exec(sqlEndedOpUpsert, seq, st.Position, st.Name, st.Attempt, ns(st.Since)); err != nil {
		return a, false, err
	}
	return a, true, nil
}
