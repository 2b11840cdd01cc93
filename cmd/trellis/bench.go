package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/trellis-dev/trellis/internal/bench"
)

// runBench implements `trellis bench --store URL --workload NAME[,NAME] --n N --json`.
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	storeURL := fs.String("store", "", "store URL, e.g. sqlite:///tmp/bench.db (required)")
	workloads := fs.String("workload", "w1,w2,w3", "comma-separated workloads: w1, w2, w3, w4, w6")
	n := fs.Int("n", 0, "runs per workload (0: the workload's default)")
	asJSON := fs.Bool("json", false, "print one JSON line per workload")
	concurrency := fs.Int("concurrency", 2048, "worker concurrency")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the workloads to this file")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench: %w\n%s", err, benchUsage())
	}
	if *storeURL == "" {
		return errors.New("bench: --store is required\n" + benchUsage())
	}
	var selected []bench.Workload
	for name := range strings.SplitSeq(*workloads, ",") {
		w, ok := bench.Find(strings.TrimSpace(name))
		if !ok {
			return fmt.Errorf("bench: unknown workload %q\n%s", name, benchUsage())
		}
		selected = append(selected, w)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, w := range selected {
		res, err := bench.Run(ctx, w, *n, bench.Options{Store: *storeURL, Concurrency: *concurrency})
		if err != nil {
			return err
		}
		if *asJSON {
			b, _ := json.Marshal(res)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		fmt.Fprintf(stdout, "%s n=%d wall=%.3fs workflows/s=%.0f steps/s=%.0f p50=%.3fms p99=%.3fms %v\n",
			res.Workload, res.N, res.WallS, res.WorkflowsPerS, res.StepsPerS, res.P50Ms, res.P99Ms, res.Settings)
	}
	return nil
}

func benchUsage() string {
	var b strings.Builder
	b.WriteString("usage: trellis bench --store URL [--workload w1,w2,w3] [--n N] [--json] [--concurrency C]\nworkloads:\n")
	for _, w := range bench.Workloads {
		fmt.Fprintf(&b, "  %s  (default n=%d) %s\n", w.Name, w.DefaultN, w.Description)
	}
	return b.String()
}
