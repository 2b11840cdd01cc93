package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// Stream statements ($n style; rebound per dialect on use through streamQueries).
const (
	// streamTake reserves $2 sequences of the stream of run $1 (the row is
	// locked by the update) and returns the last of them.
	streamTake = `UPDATE runs SET stream_seq = stream_seq + $2 WHERE sequence = $1 RETURNING stream_seq`
	// StreamInsert appends one event: run sequence, event sequence, name, data, time.
	streamInsert = `INSERT INTO stream_events (run_seq, seq, name, data, created_at) VALUES ($1, $2, $3, $4, $5)`
	streamRun    = `SELECT sequence, status, stream_seq FROM runs WHERE namespace = $1 AND id = $2`
	streamEvents = `SELECT seq, name, data, created_at FROM stream_events
	WHERE run_seq = $1 AND seq > $2 ORDER BY seq LIMIT $3`
	// streamOutcome reads what a finished run's final event says (finalOnRead).
	streamOutcome = `SELECT output, error, finished_at FROM runs WHERE sequence = $1`
)

// streamQueries are the stream statements in the dialect's style. insertN[n-1]
// appends n events in one statement.
type streamQueries struct {
	take, run, events, outcome string
	insertN                    [streamInsertMax]string
}

// streamInsertMax is the most events one statement appends; a checkpoint with
// more (rare: many Emits between two steps) takes several statements.
const streamInsertMax = 8

func newStreamQueries(d Dialect) streamQueries {
	q := streamQueries{take: d.rebind(streamTake), run: d.rebind(streamRun), events: d.rebind(streamEvents),
		outcome: d.rebind(streamOutcome)}
	for n := 1; n <= streamInsertMax; n++ {
		var b strings.Builder
		b.WriteString(streamInsert)
		for i := 1; i < n; i++ {
			fmt.Fprintf(&b, ", ($%d, $%d, $%d, $%d, $%d)", 5*i+1, 5*i+2, 5*i+3, 5*i+4, 5*i+5)
		}
		q.insertN[n-1] = d.rebind(b.String())
	}
	return q
}

// StreamAppend appends ws to the stream of the run (sequence runSeq, namespace
// and id for its topic) in tx, numbering them after its last event, and
// publishes StreamTopic on commit. The run's row is updated first, so
// concurrent writers of one run's stream take turns.
func (s *SQL) StreamAppend(tx Tx, runSeq int64, namespace, id string, ws []store.StreamWrite) error {
	if len(ws) == 0 {
		return nil
	}
	var last int64
	if err := tx.QueryRow(s.sq.take, runSeq, len(ws)).Scan(&last); err != nil {
		return fmt.Errorf("numbering stream events: %w", err)
	}
	return s.StreamInsert(tx, runSeq, last, namespace, id, ws)
}

// StreamInsert writes ws as the last events of the run's stream, numbered up to
// last, and publishes StreamTopic on commit: for a caller whose own update of the
// run's row already took their sequences (stream_seq = stream_seq + len(ws),
// returning last), which saves StreamAppend's second update of the row.
func (s *SQL) StreamInsert(tx Tx, runSeq, last int64, namespace, id string, ws []store.StreamWrite) error {
	if len(ws) == 0 {
		return nil
	}
	at := s.d.Time(tx.Now())
	seq := last - int64(len(ws)) + 1
	for rest := ws; len(rest) > 0; {
		chunk := rest[:min(len(rest), streamInsertMax)]
		rest = rest[len(chunk):]
		args := make([]any, 0, 5*len(chunk))
		for _, w := range chunk {
			args = append(args, runSeq, seq, w.Name, w.Data, at)
			seq++
		}
		if _, err := tx.Exec(s.sq.insertN[len(chunk)-1], args...); err != nil {
			return fmt.Errorf("writing stream events: %w", err)
		}
	}
	tx.Publish(store.StreamTopic(namespace, id))
	return nil
}

// finalOnRead answers the read of the stream of a run that ended without
// writing one (a job: its outcome is its one write, see docs/jobs.md) with the
// final event its record says, at sequence 1: a stream, read, always ends with
// its run's final event, and a follower sees how the run ended. (A run the store
// cancels, a job's included, has its run.cancelled written.)
func (r Reads) finalOnRead(q Querier, seq int64, status store.Status, after int64) (*store.StreamReadResult, error) {
	res := &store.StreamReadResult{Events: []*store.StreamEvent{}, Last: max(1, after), Finished: true}
	if after >= 1 {
		return res, nil
	}
	var (
		output  []byte
		errText sql.NullString
		at      Time
	)
	if err := q.QueryRow(r.sql.sq.outcome, seq).Scan(&output, &errText, &at); err != nil {
		return nil, err
	}
	info, err := ErrFromJSON(errText)
	if err != nil {
		return nil, err
	}
	w := store.FinalEvent(status, output, info)
	res.Events = append(res.Events, &store.StreamEvent{Sequence: 1, Name: w.Name, Data: w.Data, At: at.T})
	return res, nil
}

// CancelledEvent is the final stream event of a run the store cancels at once.
func CancelledEvent() store.StreamWrite {
	e := CancelledError
	return store.FinalEvent(store.StatusCancelled, nil, &e)
}

// StreamRead implements store.Store: the run's status and last sequence are read
// before its events, so a finished run's read holds every event up to its last.
func (r Reads) StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("reading stream: %w", err)
	}
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
	var res *store.StreamReadResult
	err := r.read(ctx, "reading stream", func(q Querier) error {
		var (
			seq, last int64
			status    string
		)
		err := q.QueryRow(r.sql.sq.run, p.Namespace, p.RunID).Scan(&seq, &status, &last)
		if errors.Is(err, ErrNoRows) {
			return store.RunNotFound(p.Namespace, p.RunID)
		}
		if err != nil {
			return err
		}
		if last == 0 && store.Status(status).Terminal() {
			res, err = r.finalOnRead(q, seq, store.Status(status), p.After)
			return err
		}
		res = &store.StreamReadResult{Events: []*store.StreamEvent{}, Last: max(last, p.After)}
		if last > p.After {
			err = q.Query(r.sql.sq.events, []any{seq, p.After, limit}, func(row Scanner) error {
				var (
					e  store.StreamEvent
					at Time
				)
				if err := row.Scan(&e.Sequence, &e.Name, &e.Data, &at); err != nil {
					return err
				}
				e.At = at.T
				res.Events = append(res.Events, &e)
				return nil
			})
			if err != nil {
				return err
			}
		}
		reached := p.After
		if n := len(res.Events); n > 0 {
			reached = res.Events[n-1].Sequence
		}
		res.Finished = store.Status(status).Terminal() && reached >= last
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
