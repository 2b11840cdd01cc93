package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/trellis-dev/trellis"
)

// trellis namespaces and trellis queues on a store: create, list, get, update,
// pause and resume, with their bad input (a clear error, nothing changed).
func TestNamespacesAndQueues(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	c := openClient(t, url, true)
	defer c.Close()

	// A queue needs its namespace's record; default has one from the start.
	res := trellisCmd(t, "queues", "create", "default", "--namespace", "tenant-a", "--store", url)
	if res.code != exitNotFound {
		t.Fatalf("queue in a namespace without a record: exit %d", res.code)
	}
	contains(t, "queue without namespace", res.stderr, "namespace not found", "trellis namespaces create tenant-a")
	res = trellisCmd(t, "namespaces", "create", "default", "--store", url)
	if res.code != exitConflict {
		t.Fatalf("namespaces create default: exit %d", res.code)
	}
	contains(t, "namespaces create default", res.stderr, "namespace already exists")

	res = trellisCmd(t, "namespaces", "create", "tenant-a", "--retention", "48h", "--json", "--store", url).ok(t)
	var ns trellis.Namespace
	if err := json.Unmarshal([]byte(res.stdout), &ns); err != nil || ns.Name != "tenant-a" || ns.DefaultQueue != "default" {
		t.Fatalf("namespaces create: %v %+v\n%s", err, ns, res.stdout)
	}
	res = trellisCmd(t, "namespaces", "update", "default", "--retention", "48h", "--payload-limit", "2048", "--store", url).ok(t)
	contains(t, "namespaces update", res.stdout, "NAME", "RETENTION", "48h0m0s", "2048")
	res = trellisCmd(t, "namespaces", "list", "--store", url).ok(t)
	contains(t, "namespaces list", res.stdout, "default", "tenant-a", "48h0m0s", "2048")
	res = trellisCmd(t, "namespaces", "get", "default", "--store", url).ok(t)
	contains(t, "namespaces get", res.stdout, "default", "2048")
	// A namespace command works on no one namespace: --namespace is no flag of it.
	res = trellisCmd(t, "namespaces", "get", "default", "--namespace", "other", "--store", url)
	if res.code != 2 {
		t.Fatalf("namespaces get --namespace: exit %d", res.code)
	}
	contains(t, "namespaces get --namespace", res.stderr, "flag provided but not defined: --namespace")

	res = trellisCmd(t, "queues", "create", "emails", "--concurrency-limit", "5", "--key-limit", "1",
		"--rate", "10", "--burst", "20", "--store", url).ok(t)
	contains(t, "queues create", res.stdout, "emails", "no", "5", "10/s burst 20")
	res = trellisCmd(t, "queues", "update", "emails", "--concurrency-limit", "7", "--json", "--store", url).ok(t)
	var q trellis.Queue
	if err := json.Unmarshal([]byte(res.stdout), &q); err != nil || q.ConcurrencyLimit != 7 || q.KeyLimit != 1 || q.RateBurst != 20 {
		t.Fatalf("queues update: %v %+v", err, q)
	}
	res = trellisCmd(t, "queues", "pause", "emails", "--store", url).ok(t)
	contains(t, "queues pause", res.stdout, "emails", "yes")
	res = trellisCmd(t, "queues", "pause", "emails", "--store", url)
	if res.code != exitConflict {
		t.Fatalf("pause of a paused queue: exit %d", res.code)
	}
	contains(t, "second pause", res.stderr, "already", "paused")
	res = trellisCmd(t, "queues", "list", "--store", url).ok(t)
	contains(t, "queues list", res.stdout, "emails", "yes", "7")
	trellisCmd(t, "queues", "resume", "emails", "--store", url).ok(t)
	res = trellisCmd(t, "queues", "resume", "emails", "--store", url)
	if res.code != exitConflict {
		t.Fatalf("resume of a queue not paused: exit %d", res.code)
	}
	res = trellisCmd(t, "queues", "create", "bulk", "--paused", "--store", url).ok(t)
	contains(t, "queues create --paused", res.stdout, "bulk", "yes")

	// Bad input: an error each, nothing changed.
	for _, args := range [][]string{
		{"queues", "update", "emails", "--concurrency-limit", "0"},
		{"queues", "update", "emails", "--key-limit", "-3"},
		{"queues", "update", "emails", "--rate", "-1"},
		{"queues", "update", "emails", "--max-attempts", "0"},
		{"queues", "create", "x", "--burst", "0"},
		{"queues", "get", "nope"},
		{"queues", "pause", "nope"},
		{"queues", "update", "nope", "--key-limit", "1"},
		{"queues", "list", "--namespace", "nope"},
		{"namespaces", "create", "__system__"},
		{"namespaces", "create", "default"},
		{"namespaces", "create", "y", "--retention", "-1h"},
		{"namespaces", "update", "default", "--payload-limit", "0"},
		{"namespaces", "get", "nope"},
	} {
		res := trellisCmd(t, append(args, "--store", url)...)
		want := exitUsage // a value the store refuses
		switch {
		case slices.Contains(args, "nope"):
			want = exitNotFound
		case args[2] == "default" && args[1] == "create":
			want = exitConflict
		}
		if res.code != want || res.stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want %d and an error", args, res.code, res.stderr, want)
		}
	}
	res = trellisCmd(t, "queues", "get", "emails", "--json", "--store", url).ok(t)
	q = trellis.Queue{}
	if err := json.Unmarshal([]byte(res.stdout), &q); err != nil || q.ConcurrencyLimit != 7 || q.KeyLimit != 1 ||
		q.RatePerSecond != 10 || q.Paused || q.Retry != nil {
		t.Fatalf("queue after bad input: %v %+v", err, q)
	}
	res = trellisCmd(t, "namespaces", "list", "--json", "--store", url).ok(t)
	var nl struct{ Namespaces []*trellis.Namespace }
	if err := json.Unmarshal([]byte(res.stdout), &nl); err != nil || len(nl.Namespaces) != 2 || nl.Namespaces[0].PayloadLimit != 2048 {
		t.Fatalf("namespaces after bad input: %v %+v", err, nl.Namespaces)
	}
	// Usage errors.
	for _, args := range [][]string{
		{"queues"}, {"queues", "frob"}, {"queues", "get", "--store", url},
		{"queues", "get", "a", "b", "--store", url}, {"namespaces"}, {"namespaces", "create", "--store", url},
	} {
		if res := trellisCmd(t, args...); res.code != 2 {
			t.Errorf("%v: exit %d, want 2", args, res.code)
		}
	}
}
