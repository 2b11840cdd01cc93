package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/trellis-dev/trellis/store"
)

// The audit log (store.AuditStore), written once for both dialects: the table
// audit_log of migration 0024, appended in batches by one multi-row INSERT,
// listed newest first by its sequence, purged by (namespace, at).

// auditCols are the columns of an entry, in the order AuditAppend writes them
// and scanAudit reads them (after seq).
const auditCols = `at, namespace, principal, action, target_type, target_id, outcome, request_id, source, via, detail`

// AuditAppend appends the entries of p (validated) in tx, in order.
func (s *SQL) AuditAppend(tx Tx, p *store.AuditAppendParams) error {
	var b strings.Builder
	b.WriteString(`INSERT INTO audit_log (` + auditCols + `) VALUES `)
	a := &args{d: &s.d, next: s.d.Next}
	for i := range p.Entries {
		en := &p.Entries[i]
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
			a.add(s.d.Time(en.Time)), a.add(en.Target.Namespace), a.add(en.Principal), a.add(en.Action),
			a.add(en.Target.Type), a.add(en.Target.ID), a.add(en.Outcome), a.add(en.RequestID),
			a.add(en.Source), a.add(en.Via), a.add(en.Detail))
	}
	if _, err := tx.Exec(b.String(), a.list...); err != nil {
		return fmt.Errorf("inserting audit entries: %w", err)
	}
	return nil
}

// AuditList reads one page of entries, newest first.
func (s *SQL) AuditList(q Querier, p *store.AuditListParams) (*store.AuditListResult, error) {
	l, err := s.newList(p.Limit)
	if err != nil {
		return nil, err
	}
	if p.Namespace != "" {
		l.eq("namespace", p.Namespace)
	}
	if p.Principal != "" {
		l.eq("principal", p.Principal)
	}
	switch prefix := p.ActionPrefix(); {
	case prefix != "":
		// Its first characters, rather than LIKE, whose '_' and '%' an action
		// may hold, or a range, whose order is the collation's: a linguistic
		// one (en_US) sorts "token.create" after "token/".
		l.cond("substr(action, 1, " + strconv.Itoa(utf8.RuneCountInString(prefix)) + ") = " + l.arg(prefix))
	case p.Action != "":
		l.eq("action", p.Action)
	}
	if !p.Since.IsZero() {
		l.cond("at >= " + l.arg(s.d.Time(p.Since)))
	}
	if !p.Until.IsZero() {
		l.cond("at < " + l.arg(s.d.Time(p.Until)))
	}
	if err := l.after("seq", p.Cursor); err != nil {
		return nil, err
	}
	query, args := l.build(`SELECT seq, `+auditCols+` FROM audit_log`, "seq")
	type row struct {
		seq int64
		en  *store.AuditEntry
	}
	var rows []row
	err = q.Query(query, args, func(sc Scanner) error {
		var (
			r  row
			at Time
		)
		r.en = &store.AuditEntry{}
		en := r.en
		if err := sc.Scan(&r.seq, &at, &en.Target.Namespace, &en.Principal, &en.Action, &en.Target.Type,
			&en.Target.ID, &en.Outcome, &en.RequestID, &en.Source, &en.Via, &en.Detail); err != nil {
			return err
		}
		en.Time = at.T
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := &store.AuditListResult{Entries: []*store.AuditEntry{}}
	rows, res.NextCursor = store.Page(rows, l.limit, func(r row) int64 { return r.seq })
	for _, r := range rows {
		res.Entries = append(res.Entries, r.en)
	}
	return res, nil
}

// AuditPurge deletes up to p.Limit entries of p.Namespace older than p.Before
// (validated), oldest first, and returns how many it deleted.
func (s *SQL) AuditPurge(tx Tx, p *store.AuditPurgeParams) (int, error) {
	query := s.d.rebind(`DELETE FROM audit_log WHERE seq IN (SELECT seq FROM audit_log
	WHERE namespace = $1 AND at < $2 ORDER BY at LIMIT $3)`)
	n, err := tx.Exec(query, p.Namespace, s.d.Time(p.Before), p.Limit)
	if err != nil {
		return 0, fmt.Errorf("deleting audit entries: %w", err)
	}
	return int(n), nil
}

// AuditNamespaces lists the namespaces of the entries, skipping from one to
// the next along the index on (namespace, ...) as RunNamespaces does.
func (s *SQL) AuditNamespaces(q Querier) ([]string, error) {
	return namespacesOf(q, "audit_log")
}

// AuditList implements store.AuditStore.
func (r Reads) AuditList(ctx context.Context, p *store.AuditListParams) (*store.AuditListResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("listing audit entries: %w", err)
	}
	var res *store.AuditListResult
	err := r.read(ctx, "listing audit entries", func(q Querier) (err error) {
		res, err = r.sql.AuditList(q, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// AuditNamespaces implements store.AuditStore.
func (r Reads) AuditNamespaces(ctx context.Context) ([]string, error) {
	var out []string
	err := r.read(ctx, "listing audit namespaces", func(q Querier) (err error) {
		out, err = r.sql.AuditNamespaces(q)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
