package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/internal/pgtest"
)

// w8 at tiny sizes on each store kind: every point has every measure, sane;
// its JSON line reads back into the same points; its table and its SVG plot
// (which must parse as XML) are made of them.
func TestW8GrowthAtTinySizes(t *testing.T) {
	if _, ok := Find("w8"); !ok {
		t.Fatal("no workload w8")
	}
	var all []*Result
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			url := "sqlite:" + filepath.Join(t.TempDir(), "w8.db")
			if kind == "postgres" {
				url = pgtest.SchemaURL(t)
			}
			o := Options{Store: url}
			res, err := runGrowth(t.Context(), o, growthConfig{Sizes: []int{100, 300}, W1N: 50, Samples: 20, Claims: 10})
			if err != nil {
				t.Fatal(err)
			}
			res.Workload, res.N = "w8", 300
			res.Settings["store"] = kind
			// The JSON line, read back as `--plot-from` reads it.
			line, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ReadGrowthResults(bytes.NewReader(append(line, '\n')))
			if err != nil || len(back) != 1 {
				t.Fatalf("reading the JSON line back: %d results, %v", len(back), err)
			}
			pts := GrowthPoints(back[0])
			if len(pts) != 2 {
				t.Fatalf("%d points, want 2: %s", len(pts), line)
			}
			prev := 0
			for i, p := range pts {
				// Each size holds the fill plus the earlier points' w1 and claims.
				want := []int{100, 300}[i]
				if p.Runs < want || p.Runs > want+60 || p.Runs <= prev {
					t.Errorf("point %d: %d runs, want %d to %d", i, p.Runs, want, want+60)
				}
				prev = p.Runs
				if p.W1N != 50 || p.W1PerS <= 0 {
					t.Errorf("point %d: w1 %d runs at %v/s", i, p.W1N, p.W1PerS)
				}
				if p.FillS <= 0 || p.FillPerS <= 0 {
					t.Errorf("point %d: fill %v s, %v/s", i, p.FillS, p.FillPerS)
				}
				for name, pair := range map[string][2]float64{
					"claim": {p.ClaimP50Ms, p.ClaimP99Ms}, "list first": {p.ListFirstP50Ms, p.ListFirstP99Ms},
					"list deep": {p.ListDeepP50Ms, p.ListDeepP99Ms}, "get": {p.GetP50Ms, p.GetP99Ms},
				} {
					if !(pair[0] > 0 && pair[0] <= pair[1] && pair[1] < 5000) {
						t.Errorf("point %d: %s p50 %v ms, p99 %v ms", i, name, pair[0], pair[1])
					}
				}
				if p.ListDeepAt != p.Runs/2 {
					t.Errorf("point %d: the deep page at %d, want %d", i, p.ListDeepAt, p.Runs/2)
				}
				// A finished 3-step run takes some hundreds of bytes at the least,
				// and a tiny store's tables and indexes some pages each.
				if p.StoreBytes <= 0 || p.BytesPerRun < 300 || p.BytesPerRun > 1e6 {
					t.Errorf("point %d: %d bytes, %v per run", i, p.StoreBytes, p.BytesPerRun)
				}
				if (kind == "sqlite") != (p.FileBytes > 0) {
					t.Errorf("point %d: file bytes %d on %s", i, p.FileBytes, kind)
				}
			}
			var table strings.Builder
			WriteGrowthTable(&table, back[0])
			if !strings.Contains(table.String(), "bytes/run") || strings.Count(table.String(), "\n") != 4 {
				t.Errorf("table:\n%s", table.String())
			}
			all = append(all, back[0])
		})
	}
	if len(all) == 0 {
		t.Skip("no store ran")
	}
	var svg bytes.Buffer
	if err := WriteGrowthSVG(&svg, all); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	var root string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG does not parse as XML: %v\n%s", err, svg.String())
		}
		if s, ok := tok.(xml.StartElement); ok && root == "" {
			root = s.Name.Local
		}
	}
	if root != "svg" || !strings.Contains(svg.String(), "<polyline") {
		t.Errorf("root element %q; no polyline: %v", root, !strings.Contains(svg.String(), "<polyline"))
	}
}

// w8's sizes for --n: N/100, N/10 and N, without repeats.
func TestGrowthConfigFor(t *testing.T) {
	for n, want := range map[int][]int{1_000_000: {10_000, 100_000, 1_000_000}, 300: {3, 30, 300}, 5: {5}} {
		if got := growthConfigFor(n).Sizes; !equalInts(got, want) {
			t.Errorf("n %d: sizes %v, want %v", n, got, want)
		}
	}
	if g := growthConfigFor(1_000_000); g.W1N != 2000 || g.Claims != 200 {
		t.Errorf("n 10^6: w1 %d, claims %d", g.W1N, g.Claims)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
