package storejs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

func TestParseURL(t *testing.T) {
	for raw, want := range map[string]Config{
		"jetstream:///var/lib/t": {Dir: "/var/lib/t"},
		"jetstream:///d?name=orders&replicas=3&durability=relaxed&listen=127.0.0.1:4222&cluster_listen=127.0.0.1:6222&routes=nats-route://h2:6222,nats-route://h3:6222&server_name=t1&secret=/s&replica=/r.db&lease=2s": {
			Dir: "/d", Name: "orders", Replicas: 3, Durability: DurabilityRelaxed, Listen: "127.0.0.1:4222",
			ClusterListen: "127.0.0.1:6222", Routes: []string{"nats-route://h2:6222", "nats-route://h3:6222"},
			ServerName: "t1", SecretFile: "/s", Replica: "/r.db", LeaseDuration: 2 * time.Second},
		"nats://h1:4222,h2:4222/orders?replicas=3&creds=/c&replica=/r.db": {
			Servers: []string{"nats://h1:4222", "nats://h2:4222"}, Name: "orders", Replicas: 3, Creds: "/c", Replica: "/r.db"},
		"nats://h1": {Servers: []string{"nats://h1"}, Name: "default"},
	} {
		got, err := ParseURL(raw)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for raw, wantErr := range map[string]string{
		"jetstream:relative":                                  "want jetstream:///DIR",
		"jetstream://host/dir":                                "three slashes",
		"jetstream:///d?replicas=0":                           "replicas",
		"jetstream:///d?replicas=9":                           "replicas 9",
		"jetstream:///d?durability=sometimes":                 "durability",
		"jetstream:///d?name=a.b":                             "cluster name",
		"jetstream:///d?listen=nope&secret=/s":                "address",
		"jetstream:///d?listen=127.0.0.1:4222":                "need secret=FILE",
		"jetstream:///d?cluster_listen=127.0.0.1:1":           "need secret=FILE",
		"nats://h/o?secret=/s":                                "embedded server",
		"jetstream:///d?routes=nats-route://h:1":              "routes need cluster_listen",
		"jetstream:///d?cluster_listen=:1&routes=x&secret=/s": "nats-route://",
		"jetstream:///d?lease=-1s":                            "lease",
		"jetstream:///d?bogus=1":                              "unknown parameter",
		"nats:///orders":                                      "no NATS server",
		"nats://h/orders?name=x":                              "path",
		"nats://h/o?listen=127.0.0.1:1":                       "embedded server",
		"nats://h/a b":                                        "cluster name",
	} {
		_, err := ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseURL(%q): %v, want an error saying %q", raw, err, wantErr)
		}
	}
}

// A URL that does not parse opens nothing: no directory, no server.
func TestOpenBadURLCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	_, err := store.Open(context.Background(), "jetstream://"+dir+"?replicas=9", store.OpenOptions{})
	if err == nil {
		t.Fatal("opened a store with 9 replicas")
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the directory of a refused URL exists: %v", serr)
	}
	_, err = store.Open(context.Background(), "jetstream://"+dir, store.OpenOptions{NoMigrate: true})
	if !errors.Is(err, store.ErrNoStore) {
		t.Errorf("a tool's open: %v, want ErrNoStore (read it through a server)", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a tool's open created the directory: %v", serr)
	}
}
