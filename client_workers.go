package trellis

import (
	"context"
	"slices"
	"time"
)

// WorkerRecord is what a worker process reports about itself (refreshed by its
// heartbeat): the workflows and queues it serves and whether it is live.
type WorkerRecord struct {
	Namespace string `json:"namespace"`
	// Name is the worker's lease-owner name (Run.LeaseOwner of its runs).
	Name      string   `json:"name"`
	Workflows []string `json:"workflows"`
	// Queues it claims from; empty means every queue.
	Queues []string `json:"queues"`
	// Versions maps each workflow to the versions of it the worker serves to
	// runs pinned to a version (StartOptions.Version): its
	// WorkflowOptions.Version and AlsoServes.
	Versions map[string][]int `json:"versions,omitempty"`
	// Version describes the worker's binary or SDK (free text).
	Version    string    `json:"version,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Live       bool      `json:"live"`
	// Owner is the principal (token name) whose worker made the record through
	// a server; only it may refresh or remove the record. "" for a worker on
	// the store itself.
	Owner string `json:"owner,omitempty"`
}

// Workers lists the records of this client's namespace's workers, live or not,
// by name. Records of workers dead for longer than an hour are forgotten.
func (c *Client) Workers(ctx context.Context) ([]*WorkerRecord, error) {
	return callV(ctx, c, ClientCall{Method: "Workers"}, c.workers)
}

func (c *Client) workers(ctx context.Context) ([]*WorkerRecord, error) {
	ws, err := c.b.workers(ctx)
	if err != nil {
		return nil, opErr("listing workers", err)
	}
	return ws, nil
}

// ServedWorkflows returns the names of the workflows that live workers of this
// client's namespace serve, sorted.
func (c *Client) ServedWorkflows(ctx context.Context) ([]string, error) {
	return callV(ctx, c, ClientCall{Method: "ServedWorkflows"}, func(ctx context.Context) ([]string, error) {
		ws, err := c.workers(ctx)
		if err != nil {
			return nil, err
		}
		names := []string{}
		for _, w := range ws {
			if w.Live {
				names = append(names, w.Workflows...)
			}
		}
		slices.Sort(names)
		return slices.Compact(names), nil
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
