package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Namespaces and queues as objects (store.QueueStore), and the claim of runs of
// limited queues, written once for both dialects.

const (
	nsCols    = `name, retention, default_queue, payload_limit, created_at, updated_at`
	queueCols = `namespace, name, paused, concurrency_limit, key_limit, rate_per_second, rate_burst,
	payload_limit, priority, retry, created_at, updated_at`
	// Restricted is the condition (on a queues row) of a queue that limits claims.
	Restricted = `(paused OR concurrency_limit > 0 OR key_limit > 0 OR rate_per_second > 0)`
)

type queueQueries struct {
	nsInsert, nsGet, nsList, nsUpdate                string
	qInsert, qGet, qGetLock, qList, qUpdate, qPaused string
	limited, running, bucketSet, nsExists            string
}

func newQueueQueries(d *Dialect) queueQueries {
	r := d.rebind
	return queueQueries{
		nsInsert: r(`INSERT INTO namespaces (` + nsCols + `) VALUES ($1, $2, $3, $4, $5, $5)
	ON CONFLICT DO NOTHING`),
		nsGet:    r(`SELECT ` + nsCols + ` FROM namespaces WHERE name = $1`),
		nsExists: r(`SELECT 1 FROM namespaces WHERE name = $1`),
		nsList:   r(`SELECT ` + nsCols + ` FROM namespaces ORDER BY name`),
		nsUpdate: r(`UPDATE namespaces SET retention = $2, default_queue = $3, payload_limit = $4,
	updated_at = $5 WHERE name = $1`),
		qInsert: r(`INSERT INTO queues (` + queueCols + `, rate_tokens, rate_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $11) ON CONFLICT DO NOTHING`),
		qGet:     r(`SELECT ` + queueCols + ` FROM queues WHERE namespace = $1 AND name = $2`),
		qGetLock: r(`SELECT ` + queueCols + ` FROM queues WHERE namespace = $1 AND name = $2` + d.Lock()),
		qList:    r(`SELECT ` + queueCols + ` FROM queues WHERE namespace = $1 ORDER BY name`),
		// qUpdate refills the bucket to its (new) burst when the rate changes.
		qUpdate: r(`UPDATE queues SET concurrency_limit = $3, key_limit = $4, rate_per_second = $5,
	rate_burst = $6, payload_limit = $7, priority = $8, retry = $9, updated_at = $10,
	rate_tokens = CASE WHEN rate_per_second <> $5 OR rate_burst <> $6 THEN $11 ELSE rate_tokens END,
	rate_at = CASE WHEN rate_per_second <> $5 OR rate_burst <> $6 THEN $10 ELSE rate_at END
	WHERE namespace = $1 AND name = $2`),
		qPaused: r(`UPDATE queues SET paused = $3, updated_at = $4 WHERE namespace = $1 AND name = $2`),
		limited: r(`SELECT name, paused, concurrency_limit, key_limit, rate_per_second, rate_burst,
	rate_tokens, rate_at FROM queues WHERE namespace = $1 AND ` + Restricted + ` ORDER BY name` + d.Lock()),
		running: r(`SELECT queue, concurrency_key, COUNT(*) FROM runs
	WHERE namespace = $1 AND status = 'running' AND ` + d.InList("queue", "$2") + `
	GROUP BY queue, concurrency_key`),
		bucketSet: r(`UPDATE queues SET rate_tokens = $3, rate_at = $4 WHERE namespace = $1 AND name = $2`),
	}
}

// NamespaceCreate creates a namespace; p must be valid.
func (s *SQL) NamespaceCreate(tx Tx, p *store.NamespaceCreateParams) (*store.Namespace, error) {
	ns := &store.Namespace{Name: p.Name, Retention: p.Retention, DefaultQueue: p.DefaultQueue,
		PayloadLimit: p.PayloadLimit, CreatedAt: tx.Now().UTC(), UpdatedAt: tx.Now().UTC()}
	if ns.Retention == 0 {
		ns.Retention = store.DefaultRetention
	}
	if ns.DefaultQueue == "" {
		ns.DefaultQueue = store.DefaultQueueName
	}
	n, err := tx.Exec(s.qq.nsInsert, ns.Name, int64(ns.Retention), ns.DefaultQueue, ns.PayloadLimit, s.d.Time(tx.Now()))
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %q", store.ErrNamespaceExists, p.Name)
	}
	return ns, nil
}

// NamespaceGet reads a namespace.
func (s *SQL) NamespaceGet(q Querier, name string) (*store.Namespace, error) {
	ns, err := scanNamespace(q.QueryRow(s.qq.nsGet, name))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", store.ErrNamespaceNotFound, name)
	}
	return ns, err
}

// NamespaceList reads every namespace by name.
func (s *SQL) NamespaceList(q Querier) ([]*store.Namespace, error) {
	out := []*store.Namespace{}
	err := q.Query(s.qq.nsList, nil, func(row Scanner) error {
		ns, err := scanNamespace(row)
		if err == nil {
			out = append(out, ns)
		}
		return err
	})
	return out, err
}

// NamespaceUpdate changes a namespace; p must be valid.
func (s *SQL) NamespaceUpdate(tx Tx, p *store.NamespaceUpdateParams) (*store.Namespace, error) {
	ns, err := s.NamespaceGet(tx, p.Name)
	if err != nil {
		return nil, err
	}
	if p.Retention != nil {
		ns.Retention = *p.Retention
	}
	if p.DefaultQueue != nil {
		ns.DefaultQueue = *p.DefaultQueue
	}
	if p.PayloadLimit != nil {
		ns.PayloadLimit = *p.PayloadLimit
	}
	ns.UpdatedAt = tx.Now().UTC()
	if _, err := tx.Exec(s.qq.nsUpdate, ns.Name, int64(ns.Retention), ns.DefaultQueue, ns.PayloadLimit,
		s.d.Time(tx.Now())); err != nil {
		return nil, err
	}
	return ns, nil
}

func scanNamespace(sc Scanner) (*store.Namespace, error) {
	var (
		ns               store.Namespace
		retention        int64
		created, updated Time
	)
	if err := sc.Scan(&ns.Name, &retention, &ns.DefaultQueue, &ns.PayloadLimit, &created, &updated); err != nil {
		return nil, err
	}
	ns.Retention, ns.CreatedAt, ns.UpdatedAt = store.Duration(retention), created.T, updated.T
	return &ns, nil
}

// QueueCreate creates a queue; p must be valid.
func (s *SQL) QueueCreate(tx Tx, p *store.QueueCreateParams) (*store.Queue, error) {
	if err := tx.QueryRow(s.qq.nsExists, p.Namespace).Scan(new(int)); err != nil {
		if errors.Is(err, ErrNoRows) {
			return nil, fmt.Errorf("%w: %q", store.ErrNamespaceNotFound, p.Namespace)
		}
		return nil, err
	}
	q := &store.Queue{Namespace: p.Namespace, Name: p.Name, Paused: p.Paused,
		CreatedAt: tx.Now().UTC(), UpdatedAt: tx.Now().UTC()}
	p.QueueSettings.Apply(q)
	retry, err := retryText(q.Retry)
	if err != nil {
		return nil, err
	}
	n, err := tx.Exec(s.qq.qInsert, q.Namespace, q.Name, q.Paused, q.ConcurrencyLimit, q.KeyLimit,
		q.RatePerSecond, q.RateBurst, q.PayloadLimit, q.Priority, retry, s.d.Time(tx.Now()), float64(q.RateBurst))
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrQueueExists, p.Name, p.Namespace)
	}
	return q, nil
}

// QueueGet reads a queue.
func (s *SQL) QueueGet(q Querier, namespace, name string) (*store.Queue, error) {
	return s.queueGet(q, s.qq.qGet, namespace, name)
}

func (s *SQL) queueGet(q Querier, query, namespace, name string) (*store.Queue, error) {
	queue, err := scanQueue(q.QueryRow(query, namespace, name))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrQueueNotFound, name, namespace)
	}
	return queue, err
}

// QueueList reads the queues of a namespace by name.
func (s *SQL) QueueList(q Querier, namespace string) ([]*store.Queue, error) {
	if err := q.QueryRow(s.qq.nsExists, namespace).Scan(new(int)); err != nil {
		if errors.Is(err, ErrNoRows) {
			return nil, fmt.Errorf("%w: %q", store.ErrNamespaceNotFound, namespace)
		}
		return nil, err
	}
	out := []*store.Queue{}
	err := q.Query(s.qq.qList, []any{namespace}, func(row Scanner) error {
		queue, err := scanQueue(row)
		if err == nil {
			out = append(out, queue)
		}
		return err
	})
	return out, err
}

// QueueUpdate changes a queue's settings; p must be valid. A queue that limits
// claims less than before may have runs to claim: it signals TopicReady.
func (s *SQL) QueueUpdate(tx Tx, p *store.QueueUpdateParams) (*store.Queue, error) {
	q, err := s.queueGet(tx, s.qq.qGetLock, p.Namespace, p.Name)
	if err != nil {
		return nil, err
	}
	p.QueueSettings.Apply(q)
	q.UpdatedAt = tx.Now().UTC()
	retry, err := retryText(q.Retry)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(s.qq.qUpdate, q.Namespace, q.Name, q.ConcurrencyLimit, q.KeyLimit, q.RatePerSecond,
		q.RateBurst, q.PayloadLimit, q.Priority, retry, s.d.Time(tx.Now()), float64(q.RateBurst)); err != nil {
		return nil, err
	}
	tx.Publish(store.TopicReady)
	return q, nil
}

// QueueSetPaused pauses or resumes a queue: ErrQueueState when it already is.
func (s *SQL) QueueSetPaused(tx Tx, p *store.QueueSetPausedParams) (*store.Queue, error) {
	q, err := s.queueGet(tx, s.qq.qGetLock, p.Namespace, p.Name)
	if err != nil {
		return nil, err
	}
	if q.Paused == p.Paused {
		state := "not paused"
		if q.Paused {
			state = "paused"
		}
		return nil, fmt.Errorf("%w: queue %q in namespace %q is %s", store.ErrQueueState, p.Name, p.Namespace, state)
	}
	q.Paused, q.UpdatedAt = p.Paused, tx.Now().UTC()
	if _, err := tx.Exec(s.qq.qPaused, q.Namespace, q.Name, q.Paused, s.d.Time(tx.Now())); err != nil {
		return nil, err
	}
	if !q.Paused {
		tx.Publish(store.TopicReady)
	}
	return q, nil
}

func retryText(r *store.QueueRetry) (any, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func scanQueue(sc Scanner) (*store.Queue, error) {
	var (
		q                store.Queue
		retry            sql.NullString
		created, updated Time
	)
	if err := sc.Scan(&q.Namespace, &q.Name, &q.Paused, &q.ConcurrencyLimit, &q.KeyLimit, &q.RatePerSecond,
		&q.RateBurst, &q.PayloadLimit, &q.Priority, &retry, &created, &updated); err != nil {
		return nil, err
	}
	if retry.Valid {
		q.Retry = &store.QueueRetry{}
		if err := json.Unmarshal([]byte(retry.String), q.Retry); err != nil {
			return nil, fmt.Errorf("decoding retry policy of queue %q: %w", q.Name, err)
		}
	}
	q.CreatedAt, q.UpdatedAt = created.T, updated.T
	return &q, nil
}

// Reads of the queue store.

// NamespaceGet implements store.QueueStore.
func (r Reads) NamespaceGet(ctx context.Context, p *store.NamespaceGetParams) (*store.Namespace, error) {
	var ns *store.Namespace
	err := r.read(ctx, "getting namespace", func(q Querier) (err error) {
		ns, err = r.sql.NamespaceGet(q, p.Name)
		return err
	})
	return ns, err
}

// NamespaceList implements store.QueueStore.
func (r Reads) NamespaceList(ctx context.Context) ([]*store.Namespace, error) {
	var out []*store.Namespace
	err := r.read(ctx, "listing namespaces", func(q Querier) (err error) {
		out, err = r.sql.NamespaceList(q)
		return err
	})
	return out, err
}

// QueueGet implements store.QueueStore.
func (r Reads) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.Queue, error) {
	var queue *store.Queue
	err := r.read(ctx, "getting queue", func(q Querier) (err error) {
		queue, err = r.sql.QueueGet(q, p.Namespace, p.Name)
		return err
	})
	return queue, err
}

// QueueList implements store.QueueStore.
func (r Reads) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.Queue, error) {
	var out []*store.Queue
	err := r.read(ctx, "listing queues", func(q Querier) (err error) {
		out, err = r.sql.QueueList(q, p.Namespace)
		return err
	})
	return out, err
}

// The claim of runs of limited queues.

// LimitedQueue is the claim state of a queue that limits claims.
type LimitedQueue struct {
	Name                       string
	Paused                     bool
	ConcurrencyLimit, KeyLimit int
	RatePerSecond              float64
	RateBurst                  int
	rateTokens                 float64
	rateAt                     Time
}

// LimitedQueues reads (and, where the dialect locks, locks until the transaction
// ends) the queues of namespace that limit claims. None: claim as usual.
func (s *SQL) LimitedQueues(tx Tx, namespace string) ([]*LimitedQueue, error) {
	var out []*LimitedQueue
	err := tx.Query(s.qq.limited, []any{namespace}, func(row Scanner) error {
		var q LimitedQueue
		if err := row.Scan(&q.Name, &q.Paused, &q.ConcurrencyLimit, &q.KeyLimit, &q.RatePerSecond,
			&q.RateBurst, &q.rateTokens, &q.rateAt); err != nil {
			return err
		}
		out = append(out, &q)
		return nil
	})
	return out, err
}

// claimCand is a claimable run of ClaimLimited.
type claimCand struct {
	seq, avail int64
	priority   int
	queue, key string
}

// unlimited is the capacity of a queue without a limit.
const unlimited = math.MaxInt32

// claimWindow is the fewest due runs of each workflow ClaimLimited looks at to
// choose the runs it claims: fairness between concurrency keys works among them.
const claimWindow = 100

// LimitedPoll is how soon a worker claims again while a queue with due runs is at
// one of its limits: a run that finishes frees a slot without waking anybody.
const LimitedPoll = 200 * time.Millisecond

// ClaimLimited chooses, in tx, the runs a claim (p) takes when some queues of its
// namespace limit claims (lqs, from LimitedQueues, locked): up to p.Max due pending
// runs in claim order, none of a paused queue, none beyond a queue's concurrency
// limit, rate tokens or the limit of a concurrency key. Among runs of equal
// priority the key with the fewest running runs goes first, so that no key starves
// another; a key's own runs keep their order. It takes the rate tokens of the runs
// chosen and returns their sequences (to claim in the same transaction) and, when a
// limit held runs back, when to claim again. pendingIndex is the dialect's index hint
// for the walk of pending runs of one workflow ("" for none).
func (s *SQL) ClaimLimited(tx Tx, p *store.RunsClaimParams, lqs []*LimitedQueue, pendingIndex string) ([]int64, *time.Time, error) {
	now := tx.Now()
	byName := make(map[string]*LimitedQueue, len(lqs))
	names := make([]string, 0, len(lqs))
	for _, q := range lqs {
		byName[q.Name] = q
		names = append(names, q.Name)
	}
	list, err := s.d.List(names)
	if err != nil {
		return nil, nil, err
	}
	running := map[string]int{}       // by queue
	keyRunning := map[[2]string]int{} // by queue and key
	err = tx.Query(s.qq.running, []any{p.Namespace, list}, func(row Scanner) error {
		var (
			queue, key string
			n          int
		)
		if err := row.Scan(&queue, &key, &n); err != nil {
			return err
		}
		running[queue] += n
		if key != "" {
			keyRunning[[2]string{queue, key}] += n
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("counting running runs: %w", err)
	}
	// The capacity of each limited queue, and the rate tokens it holds.
	capacity := map[string]int{}
	tokens := map[string]float64{}
	var next *time.Time
	later := func(d time.Duration) {
		if t := now.Add(d); next == nil || t.Before(*next) {
			next = &t
		}
	}
	for _, q := range lqs {
		c := unlimited
		if q.ConcurrencyLimit > 0 {
			c = max(0, q.ConcurrencyLimit-running[q.Name])
		}
		if q.RatePerSecond > 0 {
			t := float64(q.RateBurst)
			if q.rateAt.Valid {
				t = min(t, q.rateTokens+now.Sub(q.rateAt.T).Seconds()*q.RatePerSecond)
			}
			tokens[q.Name] = t
			c = min(c, int(math.Floor(t)))
		}
		if q.Paused {
			c = 0
		}
		capacity[q.Name] = c
	}
	keyFull := func(queue, key string) bool {
		q := byName[queue]
		return q != nil && q.KeyLimit > 0 && key != "" && keyRunning[[2]string{queue, key}] >= q.KeyLimit
	}
	taken := map[int64]bool{}
	took := map[string]int{}
	var seqs []int64
	for round := 0; round < 8 && len(seqs) < p.Max; round++ {
		cands, full, err := s.claimCandidates(tx, p, byName, capacity, keyRunning, pendingIndex, len(seqs))
		if err != nil {
			return nil, nil, err
		}
		cands = slices.DeleteFunc(cands, func(c claimCand) bool { return taken[c.seq] })
		blocked := false
		used := make([]bool, len(cands))
		for len(seqs) < p.Max {
			best := -1
			for i, c := range cands {
				if used[i] {
					continue
				}
				if n, ok := capacity[c.queue]; (ok && n == 0) || keyFull(c.queue, c.key) {
					used[i], blocked = true, true
					continue
				}
				if best < 0 {
					best = i
					continue
				}
				b := cands[best]
				if c.priority < b.priority {
					break
				}
				if c.key != "" && b.key != "" && keyRunning[[2]string{c.queue, c.key}] < keyRunning[[2]string{b.queue, b.key}] {
					best = i
				}
			}
			if best < 0 {
				break
			}
			c := cands[best]
			used[best], taken[c.seq] = true, true
			seqs = append(seqs, c.seq)
			if _, ok := capacity[c.queue]; ok {
				capacity[c.queue]--
				took[c.queue]++
			}
			if c.key != "" {
				keyRunning[[2]string{c.queue, c.key}]++
			}
		}
		if !full || !blocked {
			break
		}
	}
	// Queues and keys at a limit (not paused) may hold due runs back: claim again
	// soon (at the next rate token when only the rate holds a queue back).
	for _, q := range lqs {
		switch {
		case q.Paused || capacity[q.Name] > 0:
		case q.RatePerSecond > 0 && (q.ConcurrencyLimit == 0 || running[q.Name]+took[q.Name] < q.ConcurrencyLimit):
			t := tokens[q.Name] - float64(took[q.Name])
			later(time.Duration((1 - (t - math.Floor(t))) / q.RatePerSecond * float64(time.Second)))
		default:
			later(LimitedPoll)
		}
	}
	for k, n := range keyRunning {
		if q := byName[k[0]]; q != nil && q.KeyLimit > 0 && n >= q.KeyLimit {
			later(LimitedPoll)
			break
		}
	}
	// Take the rate tokens of the runs chosen.
	for _, q := range lqs {
		if n := took[q.Name]; q.RatePerSecond > 0 && n > 0 {
			if _, err := tx.Exec(s.qq.bucketSet, p.Namespace, q.Name, tokens[q.Name]-float64(n), s.d.Time(now)); err != nil {
				return nil, nil, fmt.Errorf("taking rate tokens: %w", err)
			}
		}
	}
	return seqs, next, nil
}

// claimCandidates returns due pending runs of p's workflows (and queues) in claim
// order, none of a queue without capacity or of a key at its limit: the first
// p.Max+skip of each workflow, merged. full reports that a workflow had more.
func (s *SQL) claimCandidates(tx Tx, p *store.RunsClaimParams, byName map[string]*LimitedQueue,
	capacity map[string]int, keyRunning map[[2]string]int, pendingIndex string, skip int) ([]claimCand, bool, error) {
	a := &args{d: &s.d}
	var b strings.Builder
	b.WriteString(`SELECT sequence, queue, concurrency_key, priority, available_at FROM runs ` + pendingIndex)
	fmt.Fprintf(&b, ` WHERE namespace = %s AND workflow = %s`, a.add(p.Namespace), a.add(""))
	fmt.Fprintf(&b, ` AND status = 'pending' AND available_at <= %s`, a.add(s.d.Time(tx.Now())))
	// Runs pinned to a version the worker serves, and those pinned to none
	// (store.RunsClaimParams.Versions): the list is the workflow's, set below.
	verArg := a.add(nil)
	verIdx := len(a.list) - 1
	fmt.Fprintf(&b, ` AND (pin_version = 0 OR %s)`, s.d.InList("CAST(pin_version AS TEXT)", verArg))
	if len(p.Queues) > 0 {
		l, err := s.d.List(p.Queues)
		if err != nil {
			return nil, false, err
		}
		b.WriteString(` AND ` + s.d.InList("queue", a.add(l)))
	}
	var closed []string
	for name, c := range capacity {
		if c == 0 {
			closed = append(closed, name)
		}
	}
	if len(closed) > 0 {
		slices.Sort(closed)
		l, err := s.d.List(closed)
		if err != nil {
			return nil, false, err
		}
		b.WriteString(` AND NOT ` + s.d.InList("queue", a.add(l)))
	}
	fullKeys := map[string][]string{}
	for k, n := range keyRunning {
		if q := byName[k[0]]; q != nil && q.KeyLimit > 0 && n >= q.KeyLimit && capacity[k[0]] > 0 {
			fullKeys[k[0]] = append(fullKeys[k[0]], k[1])
		}
	}
	for _, queue := range slices.Sorted(maps.Keys(fullKeys)) {
		keys := fullKeys[queue]
		slices.Sort(keys)
		l, err := s.d.List(keys)
		if err != nil {
			return nil, false, err
		}
		fmt.Fprintf(&b, ` AND NOT (queue = %s AND %s)`, a.add(queue), s.d.InList("concurrency_key", a.add(l)))
	}
	limit := max(4*p.Max, claimWindow) + skip
	fmt.Fprintf(&b, ` ORDER BY priority DESC, available_at ASC, sequence ASC LIMIT %s`, a.add(limit))
	query := b.String()
	var cands []claimCand
	full := false
	for _, wf := range slices.Compact(slices.Sorted(slices.Values(p.Workflows))) {
		a.list[1] = wf
		vs := make([]string, len(p.Versions[wf]))
		for i, v := range p.Versions[wf] {
			vs[i] = strconv.Itoa(v)
		}
		vl, err := s.d.List(vs)
		if err != nil {
			return nil, false, err
		}
		a.list[verIdx] = vl
		n := 0
		err = tx.Query(query, a.list, func(row Scanner) error {
			var (
				c     claimCand
				avail Time
			)
			if err := row.Scan(&c.seq, &c.queue, &c.key, &c.priority, &avail); err != nil {
				return err
			}
			c.avail = avail.T.UnixNano()
			cands = append(cands, c)
			n++
			return nil
		})
		if err != nil {
			return nil, false, fmt.Errorf("selecting runs: %w", err)
		}
		full = full || n == limit
	}
	slices.SortFunc(cands, func(x, y claimCand) int {
		switch {
		case x.priority != y.priority:
			return y.priority - x.priority
		case x.avail != y.avail:
			return cmpInt64(x.avail, y.avail)
		}
		return cmpInt64(x.seq, y.seq)
	})
	return cands, full, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
