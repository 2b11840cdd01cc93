package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/trellis-dev/trellis/internal/bench"
)

// runBenchCommand parses bench's flags and hands over to runBench.
func runBenchCommand(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench", "bench --store URL [flags]", benchAbout(), stdout)
	var ba benchArgs
	storeFlag(fs, &ba.store)
	fs.StringVar(&ba.workloads, "workload", "w1,w2,w3", "comma-separated `workloads`: w1, w2, w3, w4, w5, w6, w7")
	fs.IntVar(&ba.n, "n", 0, "runs per workload (0: the workload's default)")
	fs.BoolVar(&ba.asJSON, "json", false, "print one JSON line per workload")
	fs.IntVar(&ba.concurrency, "concurrency", 2048, "worker concurrency")
	fs.IntVar(&ba.claimBatch, "claim-batch", 0, "runs claimed per query (0: the workload's default, else the worker's)")
	fs.StringVar(&ba.cpuProfile, "cpuprofile", "", "write a CPU profile of the workloads to this `file`")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "bench: unexpected argument %q", pos[0])
	}
	if err := requireStore(fs, &ba.store); err != nil {
		return err
	}
	return runBench(ctx, fs, &ba, stdout)
}

// benchArgs are the parsed arguments of bench.
type benchArgs struct {
	store, workloads, cpuProfile string
	n, concurrency, claimBatch   int
	asJSON                       bool
}

// runBench runs the workloads named by ba.workloads on ba.store and prints a line each.
func runBench(ctx context.Context, fs *flag.FlagSet, ba *benchArgs, stdout io.Writer) error {
	var selected []bench.Workload
	for name := range strings.SplitSeq(ba.workloads, ",") {
		w, ok := bench.Find(strings.TrimSpace(name))
		if !ok {
			return usagef(fs, "bench: unknown workload %q", name)
		}
		selected = append(selected, w)
	}
	if ba.cpuProfile != "" {
		f, err := os.Create(ba.cpuProfile)
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
		res, err := bench.Run(ctx, w, ba.n, bench.Options{Store: ba.store, Concurrency: ba.concurrency, ClaimBatch: ba.claimBatch})
		if err != nil {
			return err
		}
		if ba.asJSON {
			b, _ := json.Marshal(res)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		fmt.Fprintf(stdout, "%s n=%d wall=%.3fs workflows/s=%.0f steps/s=%.0f p50=%.3fms p99=%.3fms",
			res.Workload, res.N, res.WallS, res.WorkflowsPerS, res.StepsPerS, res.P50Ms, res.P99Ms)
		if res.CPUMsPerRun != nil {
			fmt.Fprintf(stdout, " cpu/run=%.3fms", *res.CPUMsPerRun)
		}
		if res.DBQueriesPerRun != nil {
			fmt.Fprintf(stdout, " db-queries/run=%.2f", *res.DBQueriesPerRun)
		}
		fmt.Fprintf(stdout, " %v\n", res.Settings)
	}
	return nil
}

// benchAbout describes bench and its workloads.
func benchAbout() string {
	var b strings.Builder
	b.WriteString("Benchmark a store: run each workload and print its throughput and latencies.\n\nWorkloads:\n")
	for _, w := range bench.Workloads {
		fmt.Fprintf(&b, "  %s  (default n=%d) %s\n", w.Name, w.DefaultN, w.Description)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
