package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// growthPanel is one chart of the growth plot: measures of a point, drawn
// against the store's size.
type growthPanel struct {
	title    string
	measures []growthMeasure
	goal     float64 // a horizontal line (0: none)
	goalText string
}

type growthMeasure struct {
	label string
	dash  string // stroke-dasharray ("": solid)
	value func(GrowthPoint) float64
}

var growthPanels = []growthPanel{
	{title: "w1 (workflows/s)", measures: []growthMeasure{{"w1", "", func(p GrowthPoint) float64 { return p.W1PerS }}}},
	{title: "claim of one ready run (ms)", measures: []growthMeasure{
		{"p50", "", func(p GrowthPoint) float64 { return p.ClaimP50Ms }},
		{"p99", "6 3", func(p GrowthPoint) float64 { return p.ClaimP99Ms }}}},
	{title: "run list page of 100 (ms)", goal: 50, goalText: "p99 goal 50 ms", measures: []growthMeasure{
		{"first p50", "", func(p GrowthPoint) float64 { return p.ListFirstP50Ms }},
		{"first p99", "6 3", func(p GrowthPoint) float64 { return p.ListFirstP99Ms }},
		{"middle p50", "2 2", func(p GrowthPoint) float64 { return p.ListDeepP50Ms }},
		{"middle p99", "8 2 2 2", func(p GrowthPoint) float64 { return p.ListDeepP99Ms }}}},
	{title: "runs get (ms)", measures: []growthMeasure{
		{"p50", "", func(p GrowthPoint) float64 { return p.GetP50Ms }},
		{"p99", "6 3", func(p GrowthPoint) float64 { return p.GetP99Ms }}}},
	{title: "store bytes per finished run", measures: []growthMeasure{
		{"bytes/run", "", func(p GrowthPoint) float64 { return p.BytesPerRun }}}},
}

var growthColors = []string{"#1f6fb4", "#d2452b", "#2a9d4b", "#8a4fbf", "#b08a12"}

// ReadGrowthResults reads the w8 lines among the JSON lines of r (the output
// of `trellis bench --json`); other lines are skipped.
func ReadGrowthResults(r io.Reader) ([]*Result, error) {
	var out []*Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return nil, err
		}
		if len(GrowthPoints(&res)) > 0 {
			out = append(out, &res)
		}
	}
	return out, sc.Err()
}

// growthSeriesName names a result's series in the plot: its store, and its
// durability when relaxed.
func growthSeriesName(res *Result) string {
	name, _ := res.Settings["store"].(string)
	if name == "" {
		name = "store"
	}
	if d, _ := res.Settings["durability"].(string); d == "relaxed" {
		name += " relaxed"
	}
	return name
}

// WriteGrowthSVG draws the w8 results (one series per result: a store)
// against the store's size on a log axis, a chart per measure, as an SVG
// document.
func WriteGrowthSVG(w io.Writer, results []*Result) error {
	const (
		cols, panelW, panelH  = 3, 380, 250
		left, right, top, bot = 62, 14, 48, 42
	)
	var minX, maxX float64 = math.Inf(1), math.Inf(-1)
	for _, r := range results {
		for _, p := range GrowthPoints(r) {
			minX, maxX = math.Min(minX, float64(p.Runs)), math.Max(maxX, float64(p.Runs))
		}
	}
	if math.IsInf(minX, 1) {
		return fmt.Errorf("no w8 points to draw")
	}
	lo, hi := math.Floor(math.Log10(minX)), math.Ceil(math.Log10(maxX))
	if hi <= lo {
		hi = lo + 1
	}
	rows := (len(growthPanels) + 1 + cols - 1) / cols // + the legend
	width, height := cols*panelW, rows*panelH+24
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="bold">trellis bench w8: cost against finished runs in the store (log scale)</text>`+"\n", 8)
	for i, panel := range growthPanels {
		ox, oy := float64((i%cols)*panelW), float64((i/cols)*panelH+24)
		x0, x1, y0, y1 := ox+left, ox+panelW-right, oy+panelH-bot, oy+top
		xOf := func(v float64) float64 { return x0 + (math.Log10(v)-lo)/(hi-lo)*(x1-x0) }
		maxY := panel.goal
		for _, r := range results {
			for _, p := range GrowthPoints(r) {
				for _, m := range panel.measures {
					maxY = math.Max(maxY, m.value(p))
				}
			}
		}
		step := niceStep(maxY * 1.05 / 4)
		top := step * math.Ceil(maxY*1.05/step)
		if top <= 0 {
			top, step = 1, 0.25
		}
		yOf := func(v float64) float64 { return y0 - v/top*(y0-y1) }
		fmt.Fprintf(&b, `<g><text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", x0, oy+16, html.EscapeString(panel.title))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", x0, y1, x1-x0, y0-y1)
		for d := lo; d <= hi; d++ {
			x := xOf(math.Pow(10, d))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">10<tspan dy="-5" font-size="8">%d</tspan></text>`+"\n",
				x, y0, x, y1, x, y0+14, int(d))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">finished runs in the store</text>`+"\n", (x0+x1)/2, y0+30)
		for v := 0.0; v <= top*1.0001; v += step {
			y := yOf(v)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				x0, y, x1, y, x0-4, y+4, fmtTick(v))
		}
		if panel.goal > 0 {
			y := yOf(panel.goal)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#2a9d4b" stroke-width="1"/><text x="%.1f" y="%.1f" fill="#2a9d4b" text-anchor="end">%s</text>`+"\n",
				x0, y, x1, y, x1-4, y-3, html.EscapeString(panel.goalText))
		}
		for ri, r := range results {
			color := growthColors[ri%len(growthColors)]
			for _, m := range panel.measures {
				var pts []string
				for _, p := range GrowthPoints(r) {
					x, y := xOf(float64(p.Runs)), yOf(m.value(p))
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s %s: %s at %d runs</title></circle>`+"\n",
						x, y, color, html.EscapeString(growthSeriesName(r)), html.EscapeString(m.label), fmtTick(m.value(p)), p.Runs)
				}
				dash := ""
				if m.dash != "" {
					dash = fmt.Sprintf(` stroke-dasharray="%s"`, m.dash)
				}
				fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6"%s/>`+"\n", strings.Join(pts, " "), color, dash)
			}
		}
		// The panel's own legend: its measures' line styles.
		if len(panel.measures) > 1 {
			for mi, m := range panel.measures {
				lx, ly := x0+float64(mi%2)*110, oy+30+float64(mi/2)*13
				dash := ""
				if m.dash != "" {
					dash = fmt.Sprintf(` stroke-dasharray="%s"`, m.dash)
				}
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"%s/><text x="%.1f" y="%.1f">%s</text>`+"\n",
					lx, ly-4, lx+22, ly-4, dash, lx+26, ly, html.EscapeString(m.label))
			}
		}
		b.WriteString("</g>\n")
	}
	// The stores' colors.
	i := len(growthPanels)
	ox, oy := float64((i%cols)*panelW), float64((i/cols)*panelH+24)
	fmt.Fprintf(&b, `<g><text x="%.1f" y="%.1f" font-weight="bold">stores</text>`+"\n", ox+left, oy+40)
	for ri, r := range results {
		y := oy + 60 + float64(ri)*18
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			ox+left, y-4, ox+left+28, y-4, growthColors[ri%len(growthColors)], ox+left+34, y, html.EscapeString(growthSeriesName(r)))
	}
	b.WriteString("</g>\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", v), "0"), ".")
	default:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
}
