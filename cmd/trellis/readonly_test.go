package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/internal/pgtest"
)

// Commands on an existing store never create or migrate one: a typo in the
// schema says that no store is there instead of listing an empty new one.
func TestReadOnlyCommandsNeverMigrate(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	schema := "typo_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	t.Cleanup(func() { pgtest.DropSchema(t, base, schema) })
	url := pgtest.WithSchema(t, base, schema)
	for _, args := range [][]string{
		{"runs", "list", "--store", url},
		{"runs", "get", "x", "--store", url},
		{"runs", "history", "x", "--store", url},
		{"approvals", "list", "--store", url},
	} {
		res := trellisCmd(t, args...)
		if res.code == 0 || !strings.Contains(res.stderr, "no Trellis store at schema "+schema) {
			t.Errorf("%v: exit %d, stderr %q; want an error saying no store is there", args, res.code, res.stderr)
		}
	}
	conn, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(),
		`SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a read-only command created schema %s", schema)
	}
}
