// Package storeroute is a store.Store over several stores: each namespace's
// records live in the store it is routed to, and everything that belongs to no
// namespace lives in one control store. A server routes namespaces this way
// (trellis server --route NS=URL) so that one deployment splits its workloads
// across clusters while its clients and workers keep one address.
//
// New(control, routes) builds the router; routes maps a namespace to the store
// that holds it, and a namespace without a route is the control store's. The
// router owns the stores it is given: Close closes every one of them.
//
// # Where each call goes
//
// A call whose parameters name a namespace goes to that namespace's store, whole:
// RunCreate, RunsCreate, RunGet, RunsGet, RunList, RunCancel, RunResume,
// RunDelete, RunsPurge, HistoryList, RunChildren, KVGet, StreamRead,
// RunsClaim, RunsResumeBlocked, LeaseRelease and Checkpoint (by their lease's
// namespace), EventSend, the approvals, the namespace's own record
// (NamespaceCreate, NamespaceGet, NamespaceUpdate: by its name), its queues,
// its schedules (ScheduleFire included, see below), its worker records
// (WorkerHeartbeat, WorkerList, WorkerRemove: a store explains why a pending run
// waits from its own worker records, so they live beside the runs), its run
// counts (RunCounts) and WatchRuns. A namespace name that is not valid goes to
// the control store, which refuses it as any store does.
//
// Idempotency keys live with their namespace too. The server records a key in
// the transaction of the change it guards (the store call's Idempotency
// field), keyed by the namespace the request addresses; keeping it in that
// namespace's store keeps the key and its change in one commit, so a retry
// finds the key if and only if the change happened. IdempotencyGet goes by its
// namespace; IdempotencyPurge goes to every store (see below).
//
// The control store holds what belongs to no namespace: tokens (TokenStore),
// the servers' shared secret keys (KeyStore), the web UI's ended sessions
// (SessionStore) and the audit log (AuditStore, whose entries name a
// namespace but record the server's decisions, not the namespace's data, and
// are listed across namespaces).
//
// Calls that span namespaces go to every store and merge their answers, each
// store answering only for the namespaces routed to it (a store that is also
// opened elsewhere may hold records of other namespaces; the router never shows
// them): NamespaceList and RunNamespaces (sorted by name), ScheduleList without
// a namespace (sorted by namespace and name), QueueCounts and WorkerCounts,
// IdempotencyPurge (one Limit shared: each store purges up to what is left of
// it), LeasesExtend over leases of several namespaces (split by namespace; the
// lost and cancelled runs are merged), and Subscribe on TopicReady and
// TopicCancel (a merged channel; see Subscribe). RunTopic and StreamTopic go to
// their namespace's store.
//
// # The scheduler lease
//
// The scheduler lease fences ScheduleFire inside the store that fires: a store
// refuses a fire whose epoch is not its own lease's. So the router holds the
// lease in every store, taken in one fixed order (the control store first,
// then the routed stores): SchedulerLeaseAcquire is held only when every
// store's is, and a contender stops at the first store another holds, so two
// schedulers never split the stores between them for longer than a lease. The
// epoch it returns is the control store's; the router remembers, in memory,
// the epochs of the other stores that go with it, and ScheduleFire with that
// epoch in a routed namespace carries that store's own epoch. A fire with an
// epoch this router did not hand out is ErrNotLeader. When one store refuses
// the lease, the router gives back the leases it took in that call and
// answers not held. Every server of a deployment must be given the same routes.
//
// # Optional capabilities
//
// The router always offers Ready (every store's). It offers store.RunCounter,
// store.QueueCounter, store.WorkerCounter, store.RunWatcher and
// store.CommitObserver when every store offers all five (the SQL stores do),
// and store.ForeignCommits besides when every store offers that as well (a
// mark that changes whenever any store's does). It never offers
// store.TxStarter or store.TxCheckpointer: the caller's transaction is on one
// database, and which one a namespace's is belongs to the deployment, not to
// the code that opens the transaction.
//
// # What a router cannot keep
//
// Run sequences (Run.Sequence) are each store's own: they increase within a
// namespace, not across namespaces routed to different stores. Run IDs are
// unique within a store, so two namespaces in different stores may hold the
// same run ID (an ID is always read with its namespace).
package storeroute
