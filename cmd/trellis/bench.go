package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/trellis-dev/trellis/internal/bench"
)

// runBenchCommand parses bench's flags and hands over to runBench.
func runBenchCommand(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench", "bench (--store URL | --server URL --token T) [flags]", benchAbout(), stdout)
	var ba benchArgs
	storeFlag(fs, &ba.store)
	fs.StringVar(&ba.server, "server", "", "benchmark a Trellis server at `URL` instead of a store: the bench is its client (default $"+envServer+")")
	fs.StringVar(&ba.token, "token", "", "the bearer `token` for --server: producer, reader and worker on namespace "+bench.RemoteNamespace+
		" (worker runs the bench's remote worker for w1, w2, w3, s1 and s2); s3 reads the server's /metrics and needs reader:* (default $"+envToken+")")
	fs.IntVar(&ba.clients, "clients", 0, "with --server: concurrent keep-alive clients (0: the workload's default);\nwithout, w1 only: at most this many runs started and awaited at once (0: all N at once)")
	fs.StringVar(&ba.workloads, "workload", "", "comma-separated `workloads`: w1, w2, w3, w4, w5, w6, w7, w8, r1, ui1 or s1, s2, s3 (default w1,w2,w3);\nwith --server: "+bench.RemoteNames()+" (default api-start)")
	fs.IntVar(&ba.n, "n", 0, "runs per workload (0: the workload's default)")
	fs.BoolVar(&ba.asJSON, "json", false, "print one JSON line per workload")
	fs.BoolVar(&ba.noWorker, "no-worker", false, "with --server: start no remote worker; another process's worker (an SDK's bench worker) runs the workflows")
	fs.IntVar(&ba.concurrency, "concurrency", 2048, "worker concurrency (with --server: the remote worker's)")
	fs.BoolVar(&ba.observe, "observe", false, "turn Prometheus metrics and OpenTelemetry tracing (spans sampled, then dropped) on, to measure their overhead")
	fs.Float64Var(&ba.traceRatio, "trace-ratio", 1, "with --observe: the `share` of traces sampled, in (0, 1]")
	fs.IntVar(&ba.subscribers, "subscribers", 0, "SSE subscribers of s2 and s3 (0: their default)")
	fs.IntVar(&ba.claimBatch, "claim-batch", 0, "runs claimed per query (0: the workload's default, else the worker's)")
	fs.StringVar(&ba.cpuProfile, "cpuprofile", "", "write a CPU profile of the workloads to this `file`")
	fs.StringVar(&ba.memProfile, "memprofile", "", "write an allocation profile (what the process allocated, up to the workloads' end) to this `file`")
	fs.StringVar(&ba.plot, "plot", "", "w8: draw its measures against the store's size into this SVG `file` (with --plot-from: the lines of those files)")
	fs.StringVar(&ba.plotFrom, "plot-from", "", "with --plot: draw the w8 JSON lines of these comma-separated `files` (earlier --json runs, a store each) and run no workload")
	fs.StringVar(&ba.pprof, "pprof", "", "serve net/http/pprof on this loopback `address` while the workloads run (off by default)")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "bench: unexpected argument %q", pos[0])
	case ba.plotFrom != "":
		if ba.plot == "" {
			return usagef(fs, "bench: --plot-from needs --plot FILE")
		}
		return plotGrowthFrom(ba.plot, ba.plotFrom)
	}
	t := target{store: ba.store, server: ba.server, token: ba.token}
	if err := t.resolve(fs); err != nil {
		return err
	}
	ba.store, ba.server, ba.token = t.store, t.server, t.token
	stopPprof, err := startPprof(ba.pprof)
	if err != nil {
		return usagef(fs, "bench: %v", err)
	}
	defer stopPprof()
	if ba.server != "" {
		return runRemoteBench(ctx, fs, &ba, stdout)
	}
	if ba.noWorker {
		return usagef(fs, "bench: --no-worker needs --server")
	}
	if ba.workloads == "" {
		ba.workloads = "w1,w2,w3"
	}
	return runBench(ctx, fs, &ba, stdout)
}

// runRemoteBench runs the workloads named by ba.workloads through the server
// ba.server and prints a line each.
func runRemoteBench(ctx context.Context, fs *flag.FlagSet, ba *benchArgs, stdout io.Writer) error {
	if ba.workloads == "" {
		ba.workloads = "api-start"
	}
	var selected []bench.RemoteWorkload
	for name := range strings.SplitSeq(ba.workloads, ",") {
		w, ok := bench.FindRemote(strings.TrimSpace(name))
		if !ok {
			return usagef(fs, "bench: unknown workload %q with --server (%s)", name, bench.RemoteNames())
		}
		selected = append(selected, w)
	}
	if ba.clients < 0 {
		return usagef(fs, "bench: --clients must be positive")
	}
	if ba.subscribers < 0 {
		return usagef(fs, "bench: --subscribers must be positive")
	}
	stop, err := startProfiles(ba.cpuProfile, ba.memProfile)
	if err != nil {
		return err
	}
	defer stop()
	for _, w := range selected {
		res, err := bench.RunRemote(ctx, w, ba.n, bench.RemoteOptions{Server: ba.server, Token: ba.token, Clients: ba.clients, Concurrency: ba.concurrency, Subscribers: ba.subscribers, NoWorker: ba.noWorker})
		if err != nil {
			return err
		}
		printBenchResult(stdout, res, ba.asJSON)
	}
	return nil
}

// startProfiles starts a CPU profile into cpuFile (none when it is "") and
// returns the function that stops it and writes the allocation profile into
// memFile (none when it is ""). Either file is created at once, so that a bad
// path fails before the workloads run.
func startProfiles(cpuFile, memFile string) (func(), error) {
	mem, err := createIf(memFile)
	if err != nil {
		return nil, err
	}
	cpu, err := createIf(cpuFile)
	if err == nil && cpu != nil {
		err = pprof.StartCPUProfile(cpu)
	}
	if err != nil {
		for _, f := range []*os.File{mem, cpu} {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	return func() {
		if cpu != nil {
			pprof.StopCPUProfile()
			cpu.Close()
		}
		if mem != nil {
			if err := pprof.Lookup("allocs").WriteTo(mem, 0); err != nil {
				fmt.Fprintln(os.Stderr, "bench: writing the allocation profile:", err)
			}
			mem.Close()
		}
	}, nil
}

// createIf creates the file name, or returns nil when name is "".
func createIf(name string) (*os.File, error) {
	if name == "" {
		return nil, nil
	}
	return os.Create(name)
}

// benchArgs are the parsed arguments of bench.
type benchArgs struct {
	store, server, token, workloads, cpuProfile, memProfile, pprof string
	plot, plotFrom                                                 string
	n, concurrency, clients, subscribers, claimBatch               int
	asJSON, observe, noWorker                                      bool
	traceRatio                                                     float64
}

// runBench runs the workloads named by ba.workloads on ba.store and prints a line each.
func runBench(ctx context.Context, fs *flag.FlagSet, ba *benchArgs, stdout io.Writer) error {
	if !(ba.traceRatio > 0 && ba.traceRatio <= 1) {
		return usagef(fs, "bench: --trace-ratio must be in (0, 1], not %v", ba.traceRatio)
	}
	var selected []bench.Workload
	for name := range strings.SplitSeq(ba.workloads, ",") {
		w, ok := bench.Find(strings.TrimSpace(name))
		if !ok {
			return usagef(fs, "bench: unknown workload %q", name)
		}
		if ba.clients != 0 && w.Name != "w1" {
			return usagef(fs, "bench: --clients without --server bounds w1 only, not %s", w.Name)
		}
		selected = append(selected, w)
	}
	if ba.clients < 0 {
		return usagef(fs, "bench: --clients must be positive")
	}
	stop, err := startProfiles(ba.cpuProfile, ba.memProfile)
	if err != nil {
		return err
	}
	defer stop()
	var growth []*bench.Result
	bench.GrowthProgress = os.Stderr
	for _, w := range selected {
		res, err := bench.Run(ctx, w, ba.n, bench.Options{Store: ba.store, Concurrency: ba.concurrency, Clients: ba.clients, Subscribers: ba.subscribers, ClaimBatch: ba.claimBatch, Observe: ba.observe, TraceRatio: ba.traceRatio})
		if err != nil {
			return err
		}
		if len(bench.GrowthPoints(res)) == 0 {
			printBenchResult(stdout, res, ba.asJSON)
			continue
		}
		growth = append(growth, res)
		if ba.asJSON {
			printBenchResult(stdout, res, true)
			continue
		}
		// The points go in a table, not in the line's settings.
		line := *res
		line.Settings = maps.Clone(res.Settings)
		delete(line.Settings, "points")
		printBenchResult(stdout, &line, false)
		bench.WriteGrowthTable(stdout, res)
	}
	if ba.plot != "" {
		if len(growth) == 0 {
			return fmt.Errorf("bench: --plot draws w8's measures, and w8 did not run")
		}
		return writeGrowthPlot(ba.plot, growth)
	}
	return nil
}

// plotGrowthFrom draws the w8 lines of the comma-separated files into the
// SVG file plot.
func plotGrowthFrom(plot, files string) error {
	var all []*bench.Result
	for name := range strings.SplitSeq(files, ",") {
		f, err := os.Open(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		res, err := bench.ReadGrowthResults(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("bench: reading %s: %w", name, err)
		}
		all = append(all, res...)
	}
	if len(all) == 0 {
		return fmt.Errorf("bench: no w8 line in %s", files)
	}
	return writeGrowthPlot(plot, all)
}

func writeGrowthPlot(name string, results []*bench.Result) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := bench.WriteGrowthSVG(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printBenchResult prints a workload's result: its JSON line, or a line of text.
func printBenchResult(stdout io.Writer, res *bench.Result, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(b))
		return
	}
	fmt.Fprintf(stdout, "%s n=%d wall=%.3fs workflows/s=%.0f steps/s=%.0f p50=%.3fms p99=%.3fms",
		res.Workload, res.N, res.WallS, res.WorkflowsPerS, res.StepsPerS, res.P50Ms, res.P99Ms)
	if res.CPUMsPerRun != nil {
		fmt.Fprintf(stdout, " cpu/run=%.3fms", *res.CPUMsPerRun)
	}
	if res.DBQueriesPerRun != nil {
		fmt.Fprintf(stdout, " db-queries/run=%.2f", *res.DBQueriesPerRun)
	}
	if res.WALBytesPerRun != nil && res.StatementsPerRun != nil {
		fmt.Fprintf(stdout, " wal/run=%.0fB statements/run=%.2f", *res.WALBytesPerRun, *res.StatementsPerRun)
	}
	if res.Subscribers > 0 {
		fmt.Fprintf(stdout, " subscribers=%d", res.Subscribers)
	}
	if res.EventsPerS != nil {
		fmt.Fprintf(stdout, " events/s=%.0f", *res.EventsPerS)
	}
	if res.RSSPerSubscriberKB != nil {
		fmt.Fprintf(stdout, " rss/subscriber=%.1fKB", *res.RSSPerSubscriberKB)
	}
	fmt.Fprintf(stdout, " %v\n", res.Settings)
}

// benchAbout describes bench and its workloads.
func benchAbout() string {
	var b strings.Builder
	b.WriteString("Benchmark a store: run each workload and print its throughput and latencies.\n\nWorkloads:\n")
	for _, w := range bench.Workloads {
		fmt.Fprintf(&b, "  %s  (default n=%d) %s\n", w.Name, w.DefaultN, w.Description)
	}
	b.WriteString("\nWorkloads through a server (--server URL --token T; the bench is the server's client):\n")
	for _, w := range bench.RemoteWorkloads {
		fmt.Fprintf(&b, "  %s  (default n=%d) %s\n", w.Name, w.DefaultN, w.Description)
		if w.NeedsWorker {
			b.WriteString("      a remote worker in the bench process runs the workflows (the token needs worker too)\n")
		}
	}
	b.WriteString("\nThe stream and UI workloads (s1, s2, s3, ui1) measure a server: with --store the bench starts one\n" +
		"itself (s3: a `trellis server` child process) and measures it the same way.\n")
	return strings.TrimSuffix(b.String(), "\n")
}
