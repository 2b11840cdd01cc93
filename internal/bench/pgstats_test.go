package bench

import (
	"path/filepath"
	"testing"

	"github.com/trellis-dev/trellis/internal/pgtest"
)

// On Postgres w1's line carries the WAL and the statements per run, and says
// what the statements count; on SQLite it has neither.
func TestW1ReportsWALAndStatementsOnPostgres(t *testing.T) {
	w, ok := Find("w1")
	if !ok {
		t.Fatal("no workload w1")
	}
	res, err := Run(t.Context(), w, 20, Options{Store: pgtest.SchemaURL(t), Concurrency: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.WALBytesPerRun == nil || *res.WALBytesPerRun <= 0 {
		t.Errorf("wal_bytes_per_run: %v", res.WALBytesPerRun)
	}
	if res.StatementsPerRun == nil || *res.StatementsPerRun <= 0 {
		t.Errorf("statements_per_run: %v", res.StatementsPerRun)
	}
	if c := res.Settings["statements_counted"]; c != countedStatements && c != countedTransactions {
		t.Errorf("statements_counted: %v", c)
	}
	if res.WALBytesPerRun != nil && res.StatementsPerRun != nil {
		t.Logf("wal_bytes_per_run %.0f, statements_per_run %.2f (%v)", *res.WALBytesPerRun, *res.StatementsPerRun, res.Settings["statements_counted"])
	}

	res, err = Run(t.Context(), w, 20, Options{Store: "sqlite:" + filepath.Join(t.TempDir(), "w1.db"), Concurrency: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.WALBytesPerRun != nil || res.StatementsPerRun != nil || res.Settings["statements_counted"] != nil {
		t.Errorf("on SQLite: wal_bytes_per_run %v, statements_per_run %v, statements_counted %v",
			res.WALBytesPerRun, res.StatementsPerRun, res.Settings["statements_counted"])
	}
}
