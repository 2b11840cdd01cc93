package server

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/jsonvalid"
	ww "github.com/trellis-dev/trellis/internal/workerwire"
	"github.com/trellis-dev/trellis/store"
)

// The checks of the worker protocol's calls (workerRules says which each
// procedure makes): on the namespace, queues, leases, runs and topics a call
// touches, and on the payloads a checkpoint writes.

// checkNamespace checks that ns may be addressed and that p holds role worker
// (or admin) in it, on some queue at least.
func checkNamespace(p *auth.Principal, ns string) error {
	switch {
	case ns == "":
		return fmt.Errorf("%w: namespace is required", store.ErrInvalidParams)
	case ns == auth.SystemNamespace:
		return fmt.Errorf("%w: namespace %s cannot be addressed", ww.ErrPermissionDenied, auth.SystemNamespace)
	case !namespacePattern.MatchString(ns):
		return fmt.Errorf("%w: malformed namespace %q", store.ErrInvalidParams, ns)
	case !hasRoleIn(p, auth.RoleWorker, ns):
		return fmt.Errorf("%w: principal %q has no worker grant on namespace %q", ww.ErrPermissionDenied, p.Name, ns)
	}
	return nil
}

// checkQueues checks role worker on each of queues of ns; none means every
// queue, which needs the whole namespace (workerQueues).
func checkQueues(p *auth.Principal, ns string, queues []string) error {
	if err := checkNamespace(p, ns); err != nil {
		return err
	}
	if len(queues) == 0 && !p.Allows(auth.RoleWorker, ns, "") {
		return fmt.Errorf("%w: principal %q has no worker grant on all of namespace %q (name the queues)", ww.ErrPermissionDenied, p.Name, ns)
	}
	for _, q := range queues {
		if !p.Allows(auth.RoleWorker, ns, q) {
			return fmt.Errorf("%w: principal %q has no worker grant on namespace %q queue %q", ww.ErrPermissionDenied, p.Name, ns, q)
		}
	}
	return nil
}

// checkRun checks role worker on the queue of run ref of ns (workerRun): a
// grant of the whole namespace needs no read; another reads the run.
func (h *workerService) checkRun(ctx context.Context, p *auth.Principal, ns, ref string) error {
	if err := checkNamespace(p, ns); err != nil || p.Allows(auth.RoleWorker, ns, "") {
		return err
	}
	if ref == "" {
		return fmt.Errorf("%w: run is required", store.ErrInvalidParams)
	}
	run, err := h.s.store.RunGet(ctx, &store.RunGetParams{Namespace: ns, Ref: ref, OmitLarge: true})
	if err != nil {
		return err
	}
	return checkQueues(p, ns, []string{run.Queue})
}

// checkLeases checks the leases of a write (workerLeases): role worker on
// each lease's queue, else the whole call is refused; and each lease's secret,
// valid[i] false for a lease whose secret is not the one this store's servers
// issued for that namespace, run, queue and token (forged, guessed, or from an
// older lease), which the caller answers as lost without touching the store.
func (h *workerService) checkLeases(p *auth.Principal, leases []store.Lease) (valid []bool, err error) {
	if len(leases) == 0 && !slices.ContainsFunc(p.Grants, func(g auth.Grant) bool {
		return g.Role == auth.RoleWorker || g.Role == auth.RoleAdmin
	}) { // nothing to write, but only a worker may ask
		return nil, fmt.Errorf("%w: principal %q has no worker grant", ww.ErrPermissionDenied, p.Name)
	}
	valid = make([]bool, len(leases))
	checked := "" // the namespace of a batch's leases, checked once
	for i, l := range leases {
		if l.Namespace != checked {
			if err := checkNamespace(p, l.Namespace); err != nil {
				return nil, fmt.Errorf("run %q: %w", l.RunID, err)
			}
			checked = l.Namespace
		}
		if !p.Allows(auth.RoleWorker, l.Namespace, l.Queue) {
			return nil, fmt.Errorf("%w: run %q: principal %q has no worker grant on namespace %q queue %q",
				ww.ErrPermissionDenied, l.RunID, p.Name, l.Namespace, l.Queue)
		}
		valid[i] = h.s.leaseKeys.Valid(l)
	}
	return valid, nil
}

// checkStarts checks the child runs a checkpoint starts: each is a start in
// its queue, allowed to a principal that may start runs there (producer) or
// claim them (worker), and named by the rule of a start through the API
// (store.ValidateName for its workflow and queue).
func checkStarts(p *auth.Principal, ns string, groups []*store.ChildGroup) error {
	for _, g := range groups {
		for _, r := range g.Runs {
			for _, err := range []error{store.ValidateName("workflow", r.Workflow), store.ValidateName("queue", r.Queue)} {
				if err != nil {
					return fmt.Errorf("child run %q: %w", r.ID, err)
				}
			}
			if !p.Allows(auth.RoleProducer, ns, r.Queue) && !p.Allows(auth.RoleWorker, ns, r.Queue) {
				return fmt.Errorf("%w: child run %q: principal %q may not start runs in namespace %q queue %q",
					ww.ErrPermissionDenied, r.ID, p.Name, ns, r.Queue)
			}
		}
	}
	return nil
}

// checkTopic checks a subscription (workerTopic): the wake-up topics need
// role worker in the namespace; a run's or its stream's topic, on the run's
// queue.
func (h *workerService) checkTopic(ctx context.Context, p *auth.Principal, ns, topic string) error {
	if err := checkNamespace(p, ns); err != nil {
		return err
	}
	if topic == store.TopicReady || topic == store.TopicCancel {
		return nil
	}
	for _, prefix := range []string{store.RunTopicPrefix(ns), store.StreamTopic(ns, "")} {
		if run, ok := strings.CutPrefix(topic, prefix); ok && run != "" {
			return h.checkRun(ctx, p, ns, run)
		}
	}
	return fmt.Errorf("%w: topic %q is not %q, %q or a run or stream topic of namespace %q", store.ErrInvalidParams,
		topic, store.TopicReady, store.TopicCancel, ns)
}

// checkPayloads checks the payloads a checkpoint writes: each must be JSON
// in valid UTF-8 with each name once per object (jsonvalid), as the HTTP
// API's are, since the API sends them back as JSON (a server takes JSON
// payloads: trellis.Config.Codec must encode JSON). A refused checkpoint
// writes nothing; the error names the payload. With a limit (the payload
// limit of the run's queue), a payload above it is refused too
// (payload_too_large): the worker should have failed its step or run.
func checkPayloads(p *store.CheckpointParams, limit int) error {
	bad := func(b []byte) error {
		if len(b) == 0 { // none: the API shows it as null
			return nil
		}
		if limit > 0 && len(b) > limit {
			return fmt.Errorf("payload too large: %d bytes (queue %q limit %d)", len(b), p.Lease.Queue, limit)
		}
		return jsonvalid.Check(b)
	}
	refuse := func(err error, what string, args ...any) error {
		return fmt.Errorf("%w: run %q: %s: %v", store.ErrInvalidParams, p.Lease.RunID, fmt.Sprintf(what, args...), err)
	}
	if err := bad(p.Output); err != nil {
		return refuse(err, "output")
	}
	for _, op := range p.Ops {
		if err := bad(op.Result); err != nil {
			return refuse(err, "the result of op %d", op.Position)
		}
	}
	for _, kv := range p.KV {
		if err := bad(kv.Value); err != nil && !kv.Delete {
			return refuse(err, "value %q", kv.Key)
		}
	}
	for i, e := range p.Stream {
		if err := bad(e.Data); err != nil {
			return refuse(err, "stream event %d (%q)", i, e.Name)
		}
	}
	for _, g := range p.Children {
		for _, r := range g.Runs {
			if err := bad(r.Input); err != nil {
				return refuse(err, "the input of child run %q", r.ID)
			}
		}
	}
	for _, a := range p.Approvals {
		if err := bad(a.Details); err != nil {
			return refuse(err, "the details of approval %q", a.ID)
		}
	}
	return nil
}
