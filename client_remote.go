package trellis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/store"
)

// remoteBackend is the backend of a client on a server (Config.Server): its
// calls go to the server's HTTP API through remote (remote.go), whose methods
// it takes as they are where they fit the backend; the others are below. A
// remote worker (NewWorker with Config.Server) has a worker too, on the
// server's worker protocol.
type remoteBackend struct {
	*remote
	workerRole
	cfg *Config // the client's
}

func newRemoteBackend(c *Client) (*remoteBackend, error) {
	r, err := newRemote(c.cfg)
	if err != nil {
		return nil, err
	}
	return &remoteBackend{remote: r, cfg: &c.cfg}, nil
}

func (r *remoteBackend) register(ctx context.Context, names []string) error {
	return r.serve(ctx, r.cfg, names)
}

func (r *remoteBackend) shutdown() error {
	err := r.stopWorker(r.cfg)
	r.close()
	if r.wclose != nil {
		r.wclose()
	}
	return err
}

// startTx cannot span a server: the transaction is the application's.
func (r *remoteBackend) startTx(ctx context.Context, tx any, def *definition, input []byte, o StartOptions) (*Run, error) {
	return nil, fmt.Errorf("starting %s: %w", def.name, ErrTxNotSupported)
}

func (r *remoteBackend) startMany(ctx context.Context, reqs []StartRequest) ([]StartResult, error) {
	runs := make([]startBody, len(reqs))
	for i, req := range reqs {
		if len(req.Input) > 0 && !json.Valid(req.Input) {
			return nil, fmt.Errorf("starting runs: item %d: %w: a server takes JSON inputs (Config.Codec must encode JSON)", i, ErrInvalidInput)
		}
		if err := checkVersion(req.Options); err != nil {
			return nil, fmt.Errorf("starting runs: item %d: %w", i, err)
		}
		o := req.Options
		runs[i] = startBodyOf(runParams("", &definition{name: req.Workflow}, uuid.Nil.String(), req.Input, o, ""), o)
		runs[i].Queue = o.Queue // "" lets the server apply the workflow's default
	}
	results, err := r.startBatch(ctx, runs)
	if err != nil {
		return nil, fmt.Errorf("starting runs: %w", err)
	}
	return results, nil
}

func (r *remoteBackend) exportHistory(ctx context.Context, ref string) (*RecordedHistory, error) {
	// The server's history route answers this very document.
	h, err := r.remote.exportHistory(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("exporting history: %w", err)
	}
	return h, nil
}

func (r *remoteBackend) cancel(ctx context.Context, ref string) error {
	_, err := r.act(ctx, ref, "cancel")
	return err
}

func (r *remoteBackend) resume(ctx context.Context, ref string) error {
	_, err := r.act(ctx, ref, "resume")
	return err
}

func (r *remoteBackend) delete(ctx context.Context, ref string) error {
	_, err := r.do(ctx, httpc.Call{Method: http.MethodDelete, Path: r.runPath(ref)})
	return err
}

// waitRun waits for a run by its ID: alone or, with many waits in flight,
// batched into GET runs:wait (remote_waits.go).
func (r *remoteBackend) waitRun(ctx context.Context, runID string) (*Run, error) {
	return r.waits.wait(ctx, runID)
}

// decide decides as the token's principal: principal is ignored.
func (r *remoteBackend) decide(ctx context.Context, id string, approve bool, _, comment string) (*ApprovalRecord, error) {
	return r.remote.decide(ctx, id, approve, comment)
}

func (r *remoteBackend) namespaceQueue(ctx context.Context) (string, error) {
	ns, err := r.getNamespace(ctx, r.cfg.Namespace)
	if err != nil {
		if errors.Is(err, ErrNamespaceNotFound) {
			return store.DefaultQueueName, nil
		}
		return "", opErr(fmt.Sprintf("getting namespace %q", r.cfg.Namespace), err)
	}
	if ns.DefaultQueue == "" {
		return store.DefaultQueueName, nil
	}
	return ns.DefaultQueue, nil
}

func (r *remoteBackend) createNamespace(ctx context.Context, o NamespaceOptions) (*Namespace, error) {
	ns := new(Namespace)
	return ns, r.call(ctx, http.MethodPost, "/v1/namespaces", o, ns)
}

func (r *remoteBackend) getNamespace(ctx context.Context, name string) (*Namespace, error) {
	ns := new(Namespace)
	return ns, r.call(ctx, http.MethodGet, nsPath(name), nil, ns)
}

func (r *remoteBackend) listNamespaces(ctx context.Context) ([]*Namespace, error) {
	var l struct {
		Namespaces []*Namespace `json:"namespaces"`
	}
	err := r.call(ctx, http.MethodGet, "/v1/namespaces", nil, &l)
	return l.Namespaces, err
}

func (r *remoteBackend) updateNamespace(ctx context.Context, u NamespaceUpdate) (*Namespace, error) {
	ns := new(Namespace)
	body := u
	body.Name = "" // the path names it
	return ns, r.call(ctx, http.MethodPatch, nsPath(u.Name), body, ns)
}

func (r *remoteBackend) createQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	q := new(Queue)
	body := struct {
		Name string `json:"name"`
		QueueSettings
	}{name, s}
	return q, r.call(ctx, http.MethodPost, r.ns+"/queues", body, q)
}

func (r *remoteBackend) getQueue(ctx context.Context, name string) (*Queue, error) {
	q := new(Queue)
	return q, r.call(ctx, http.MethodGet, r.queuePath(name), nil, q)
}

func (r *remoteBackend) listQueues(ctx context.Context) ([]*Queue, error) {
	var l struct {
		Queues []*Queue `json:"queues"`
	}
	err := r.call(ctx, http.MethodGet, r.ns+"/queues", nil, &l)
	return l.Queues, err
}

func (r *remoteBackend) updateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	q := new(Queue)
	return q, r.call(ctx, http.MethodPatch, r.queuePath(name), s, q)
}

func (r *remoteBackend) setQueuePaused(ctx context.Context, name string, paused bool) (*Queue, error) {
	verb := map[bool]string{true: "pause", false: "resume"}[paused]
	q := new(Queue)
	return q, r.call(ctx, http.MethodPost, r.queuePath(name)+"/"+verb, nil, q)
}

func nsPath(name string) string { return "/v1/namespaces/" + url.PathEscape(name) }

func (r *remote) queuePath(name string) string { return r.ns + "/queues/" + url.PathEscape(name) }

// call makes a JSON call of the API: body (nil for none) in, out (nil for none) back.
func (r *remote) call(ctx context.Context, method, path string, body, out any) error {
	_, err := r.do(ctx, httpc.Call{Method: method, Path: path, Body: body, Out: out})
	return err
}
