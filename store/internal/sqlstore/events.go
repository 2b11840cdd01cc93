package sqlstore

import (
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// Deliver adds an event to the inbox of run runSeq, whose row the caller has
// locked, and wakes the run if it waits for that name. It returns the event's Seq
// and whether the run was woken. The event's send time is tx.Now().
func (s *SQL) Deliver(tx Tx, runSeq int64, name string, payload []byte) (int64, bool, error) {
	now := s.d.Time(tx.Now())
	var seq int64
	if err := tx.QueryRow(s.q.eventInsert, runSeq, name, Blob(payload), now).Scan(&seq); err != nil {
		return 0, false, fmt.Errorf("adding event: %w", err)
	}
	var namespace, id string
	err := tx.QueryRow(s.q.wakeOnEvent, now, runSeq, name).Scan(&namespace, &id)
	switch {
	case errors.Is(err, ErrNoRows): // not waiting for it
		return seq, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("waking run: %w", err)
	}
	tx.Publish(store.RunTopic(namespace, id), store.TopicReady)
	return seq, true, nil
}

// DeliverIfActive is Deliver for the store's own events to a run whose row is not
// locked yet: it locks it, and adds nothing to the inbox of a finished run.
func (s *SQL) DeliverIfActive(tx Tx, runSeq int64, name string, payload []byte) error {
	var status string
	if err := tx.QueryRow(s.q.runStatusLock, runSeq).Scan(&status); err != nil {
		return fmt.Errorf("locking run: %w", err)
	}
	if store.Status(status).Terminal() {
		return nil
	}
	_, _, err := s.Deliver(tx, runSeq, name, payload)
	return err
}

// Blob returns b as a BLOB or BYTEA argument, keeping nil as NULL.
func Blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
