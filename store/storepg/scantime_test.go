package storepg

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// The store's connections scan a timestamptz into a sqlstore.Time through
// timePlan, without allocating, instead of through its sql.Scanner.
func TestTimeCodecScansWithoutAllocating(t *testing.T) {
	m := pgtype.NewMap()
	registerTimeType(m)
	want := time.Date(2026, 11, 29, 12, 30, 0, 123456000, time.UTC)
	src, err := m.Encode(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, want, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got sqlstore.Time
	plan := m.PlanScan(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, &got)
	if _, ok := plan.(timePlan); !ok {
		t.Fatalf("plan for *sqlstore.Time = %T, want timePlan", plan)
	}
	if err := plan.Scan(src, &got); err != nil || !got.Valid || !got.T.Equal(want) || got.T.Location() != time.UTC {
		t.Fatalf("scanned %v (valid %v), %v; want %v in UTC", got.T, got.Valid, err, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = plan.Scan(src, &got) }); n != 0 {
		t.Errorf("scanning a time allocates %v times, want 0", n)
	}
	if err := plan.Scan(nil, &got); err != nil || got.Valid {
		t.Errorf("scanning NULL: %+v, %v; want invalid", got, err)
	}
	// Other targets keep pgx's plans.
	var tm time.Time
	if err := m.Scan(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, src, &tm); err != nil || !tm.Equal(want) {
		t.Errorf("scanning into a time.Time: %v, %v; want %v", tm, err, want)
	}
}

// On a real connection: a time, NULL, and infinity (an error, as before).
func TestTimeCodecOnConnection(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if err := registerTimeCodec(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	var a, b sqlstore.Time
	err = conn.QueryRow(t.Context(), `SELECT '2026-11-29 12:30:00.5+02'::timestamptz, NULL::timestamptz`).Scan(&a, &b)
	want := time.Date(2026, 11, 29, 10, 30, 0, 500000000, time.UTC)
	if err != nil || !a.Valid || !a.T.Equal(want) || a.T.Location() != time.UTC || b.Valid {
		t.Fatalf("scanned %+v, %+v, %v; want %v in UTC and NULL", a, b, err, want)
	}
	if err := conn.QueryRow(t.Context(), `SELECT 'infinity'::timestamptz`).Scan(&a); err == nil {
		t.Errorf("scanning infinity into a sqlstore.Time: no error")
	}
}
