package sqlstore

// SQL is the shared logic bound to one dialect. Its statements are rewritten for
// the dialect once, in New; a driver keeps one for its lifetime.
type SQL struct {
	d    Dialect
	q    queries
	tok  tokenQueries
	key  keyQueries
	idem idemQueries
	sess sessionQueries
	cq   cancelQueries
	qq   queueQueries
	sq   streamQueries
	sch  scheduleQueries
}

// queries are the fixed statements of the shared logic, in the dialect's style.
type queries struct {
	runByID, runByWorkflowID    string
	kvGet, runChildren          string
	approvalGet, approvalLock   string
	eventInsert, wakeOnEvent    string
	runStatusLock               string
	approvalInsert, approvalSet string
	approvalsExpire             string
	groupInsert, groupCount     string
	releaseHeld, groupReleased  string
	groupFail, groupEnd         string
	migrationRecord             string
	purgeWalks                  []string
}

// New binds the shared logic to d.
func New(d Dialect) *SQL {
	s := &SQL{d: d}
	r := d.rebind
	s.q = queries{
		runByID: r(`SELECT ` + RunCols + ` FROM runs WHERE namespace = $1 AND id = $2`),
		// After runByID found nothing: see RefSeq.
		runByWorkflowID: r(`SELECT ` + RunCols + ` FROM runs WHERE sequence =
	(SELECT MAX(sequence) FROM runs WHERE namespace = $1 AND workflow_id = $2 AND workflow_id <> id)`),
		// kvGet returns one row: the run's sequence (NULL: no run), the value, and
		// whether the key exists.
		kvGet: r(`SELECT r.sequence, kv.value, kv.key IS NOT NULL
	FROM (SELECT ` + RefSeq + ` AS sequence) r
	LEFT JOIN kv ON kv.run_seq = r.sequence AND kv.key = $3`),
		runChildren: r(`SELECT ` + RunCols + ` FROM runs WHERE parent_seq =
	(SELECT sequence FROM runs WHERE namespace = $1 AND id = $2) AND parent_position = $3
	ORDER BY item`),
		approvalGet:  r(s.approvalSelect() + ` WHERE a.namespace = $1 AND a.id = $2`),
		approvalLock: r(s.approvalSelect() + ` WHERE a.namespace = $1 AND a.id = $2` + d.Lock("r", "a")),
		eventInsert:  r(d.EventInsert),
		wakeOnEvent:  r(d.WakeOnEvent),
		approvalInsert: r(`INSERT INTO approvals (namespace, id, run_seq, position, name, approvers,
	subject, details, status, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10)`),
		approvalsExpire: r(`UPDATE approvals SET status = 'expired', decided_at = $1
	WHERE run_seq = $2 AND status = 'pending' AND ` + d.InList("id", "$3")),
		groupInsert: r(`INSERT INTO child_groups (parent_seq, position, max_concurrency, fail_fast,
	detached, total, active, held, next_item) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`),
		// groupCount counts children that ended: $3 succeeded, $4 failed, $5
		// cancelled, of which $6 were active and $7 held.
		groupCount: r(`UPDATE child_groups SET succeeded = succeeded + $3, failed = failed + $4,
	cancelled = cancelled + $5, active = active - $6, held = held - $7
	WHERE parent_seq = $1 AND position = $2
	RETURNING max_concurrency, fail_fast, detached, total, active, held, next_item,
	succeeded, failed, cancelled, ended`),
		releaseHeld: r(d.ReleaseHeld),
		groupReleased: r(`UPDATE child_groups SET active = active + $3, held = held - $3,
	next_item = $4 WHERE parent_seq = $1 AND position = $2`),
		groupFail: r(`UPDATE child_groups SET ended = true WHERE parent_seq = $1 AND position = $2`),
		groupEnd: r(`UPDATE child_groups SET ended = true WHERE parent_seq = $1 AND position = $2
	RETURNING detached, total, succeeded, failed, cancelled`),
		migrationRecord: r(`INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`),
		approvalSet: r(`UPDATE approvals SET status = $1, principal = $2, comment = $3, decided_at = $4
	WHERE seq = $5`),
		runStatusLock: r(`SELECT status FROM runs WHERE sequence = $1` + d.Lock()),
		purgeWalks:    purgeWalks(&d),
	}
	s.cq = newCancelQueries(d)
	s.sq = newStreamQueries(d)
	s.tok = newTokenQueries(&s.d)
	s.key = newKeyQueries(r)
	s.sess = newSessionQueries(r)
	s.qq = newQueueQueries(&s.d)
	s.idem = newIdemQueries(r)
	s.sch = newScheduleQueries(r)
	return s
}

// Dialect returns the dialect the logic is bound to.
func (s *SQL) Dialect() *Dialect { return &s.d }

// Rebind rewrites a statement written with $n parameters in the dialect's style.
func (s *SQL) Rebind(query string) string { return s.d.rebind(query) }
