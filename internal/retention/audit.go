package retention

import (
	"context"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The audit log (store.AuditStore) is retained like runs: an entry of a
// namespace is deleted once it is older than the namespace's retention period
// (Config.Period), and an entry of no namespace (the tokens') once it is older
// than the longest period a namespace keeps anything (GlobalPeriodOf), so that
// the record of who made a token outlives none of the runs it could touch.

// GlobalPeriodOf returns the retention period of the audit entries of no
// namespace: the longest of DefaultPeriod and every namespace record's
// retention.
func GlobalPeriodOf(ctx context.Context, st store.Store) (time.Duration, error) {
	list, err := st.NamespaceList(ctx)
	if err != nil {
		return 0, err
	}
	longest := DefaultPeriod
	for _, n := range list {
		longest = max(longest, time.Duration(n.Retention))
	}
	return longest, nil
}

// passAudit deletes every audit entry expired now, namespace by namespace,
// batch by batch, resting between batches as Duty says.
func (p *Purger) passAudit(ctx context.Context) error {
	namespaces, err := p.cfg.Store.AuditNamespaces(ctx)
	if err != nil {
		return err
	}
	for _, ns := range namespaces {
		period, err := p.auditPeriod(ctx, ns)
		if err != nil {
			return err
		}
		if period <= 0 {
			continue // kept for ever
		}
		err = p.inBatches(ctx, p.cfg.AuditBatch, &p.auditDeleted, "audit entries", ns, func() (int, error) {
			return p.cfg.Store.AuditPurge(ctx, &store.AuditPurgeParams{Namespace: ns,
				Before: p.cfg.Clock.Now().Add(-period), Limit: p.cfg.AuditBatch})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// auditPeriod is the retention period of the audit entries of namespace ns
// ("": of no namespace).
func (p *Purger) auditPeriod(ctx context.Context, ns string) (time.Duration, error) {
	if ns == "" {
		return p.cfg.GlobalPeriod(ctx)
	}
	return p.cfg.Period(ctx, ns)
}

// AuditDeleted is how many audit entries the purger has deleted so far.
func (p *Purger) AuditDeleted() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.auditDeleted
}
