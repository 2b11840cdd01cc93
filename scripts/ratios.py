#!/usr/bin/env python3
"""Issue 40's ratios in one command, measured as docs/benchmarks.md asks: Trellis
against the peers' harnesses (DBOS and River, in ../shared/peers) and through a
server against embedded, each pair alternated within a round, on fresh files and
schemas, the same minutes.

    python3 scripts/ratios.py [--rounds 3] [--only w1-pg,w5-pg] [--pg URL] [--peers DIR]

It builds ./cmd/trellis and the peers' harnesses (go build) into a temporary
directory, then prints a line per measurement and a summary per pair: each
round's ratio, the goal, and the CPU a run or job cost over every process that
did the work (the bench or the peer's process, the server when there is one,
and every Postgres process when Postgres is local and /proc readable), which
varies less with the machine's speed than the rates do. Standard library only.
The Postgres database is used through schemas it drops and creates
(trellis_ratios, trellis_ratios_srv, dbos, river): use one nobody else writes to.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pg_cpu():
    """Seconds of CPU of every postgres process (reaped children included), or None."""
    total, seen = 0, False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "postgres":
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        seen = True
    return total / os.sysconf("SC_CLK_TCK") if seen else None


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_json(cmd, cwd=None, env=None):
    """Runs cmd and returns the last JSON object it printed on stdout."""
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        sys.exit(f"ratios: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(lines[-1])


class Env:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.trellis = os.path.join(tmp, "trellis")
        self.pg = args.pg
        self.psql_env = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")

    def drop(self, schema):
        subprocess.run(["psql", "-q", self.pg, "-c", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                       env=self.psql_env, check=True, stdout=subprocess.DEVNULL)

    def measure(self, prep, fn, n):
        """Runs prep (fresh files and schemas), then fn (returning its JSON line), and
        adds to the line the CPU per unit (run or job) of all processes during fn."""
        prep()
        c0, p0 = children_cpu(), pg_cpu()
        res = fn()
        c1, p1 = children_cpu(), pg_cpu()
        cpu = c1 - c0 + ((p1 - p0) if p0 is not None and p1 is not None else 0)
        res["_cpu_ms"] = 1000 * cpu / n
        return res

    # Trellis embedded. clients bounds w1 as the DBOS harness's -conc does its own.
    def embedded(self, store, workload, n, clients=0):
        url = self.pg + "&schema=trellis_ratios" if store == "pg" else "sqlite://" + os.path.join(self.tmp, "t.db")

        def prep():
            if store == "pg":
                self.drop("trellis_ratios")
            else:
                self.remove("t.db")
        cmd = [self.trellis, "bench", "--store", url, "--workload", workload, "--n", str(n), "--json"]
        if clients:
            cmd += ["--clients", str(clients)]
        return self.measure(prep, lambda: run_json(cmd), n)

    def remove(self, prefix):
        for f in os.listdir(self.tmp):
            if f.startswith(prefix):
                os.remove(os.path.join(self.tmp, f))

    # Trellis through a server the script starts on a fresh store.
    def server(self, store, workload, n):
        d = tempfile.mkdtemp(dir=self.tmp)
        url = self.pg + "&schema=trellis_ratios_srv" if store == "pg" else "sqlite://" + os.path.join(d, "s.db")

        def prep():
            if store == "pg":
                self.drop("trellis_ratios_srv")

        def go():
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            tok = os.path.join(d, "token")
            srv = subprocess.Popen([self.trellis, "server", "--store", url, "--listen", f"127.0.0.1:{port}",
                                    "--admin-token-file", tok, "--access-log=false"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                base = f"http://127.0.0.1:{port}"
                for _ in range(200):
                    try:
                        if os.path.exists(tok) and urllib.request.urlopen(base + "/readyz", timeout=1).status == 200:
                            break
                    except OSError:
                        pass
                    time.sleep(0.05)
                with open(tok) as f:
                    token = f.read().strip()
                return run_json([self.trellis, "bench", "--server", base, "--token", token,
                                 "--workload", workload, "--n", str(n), "--json"])
            finally:
                srv.send_signal(signal.SIGTERM)
                srv.wait()  # its CPU counts: RUSAGE_CHILDREN has it once it is reaped
                shutil.rmtree(d, ignore_errors=True)
        return self.measure(prep, go, n)

    # The peers, as ../shared/peers/README.md runs them.
    def dbos(self, store, workload, n):
        if store == "pg":
            db, conc = self.pg, str(DBOS_PG_CONC)
        else:
            db, conc = "sqlite:" + os.path.join(self.tmp, "dbos.db"), "16"
        cmd = [os.path.join(self.tmp, "dbos-bench"), "-db", db, "-workload", workload, "-n", str(n)]
        if workload == "w1":
            cmd += ["-mode", "direct", "-conc", conc]

        def prep():
            if store == "pg":
                self.drop("dbos")
            else:
                self.remove("dbos.db")
        return self.measure(prep, lambda: run_json(cmd, cwd=self.tmp), n)

    def river(self, workload, n):
        rb = os.path.join(self.tmp, "river-bench")

        def prep():
            self.drop("river")
            subprocess.run([rb, "-db", self.pg, "-schema", "river", "-workload", "migrate"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self.measure(prep, lambda: run_json([rb, "-db", self.pg, "-schema", "river", "-workload", workload,
                                                    "-n", str(n), "-cooldown", "1ms", "-pollint", "50ms"],
                                                   cwd=self.tmp), n)


def rate(r):
    return r["workflows_per_s"]


def p50(r):
    return r["p50_ms"]


# The DBOS harness's w1 on Postgres keeps at most this many workflows in flight
# (-conc); Trellis' side of those pairs is bounded the same (bench --clients).
DBOS_PG_CONC = 2000

# Each pair: the measurement of Trellis, the one it is compared with, which
# figure, how the ratio is formed (Trellis over other, or the reverse for
# latencies), and the goal of issue 40.
PAIRS = {
    "w1-pg": ("w1 Postgres, n = 2,000, against DBOS", lambda e: e.embedded("pg", "w1", 2000, DBOS_PG_CONC),
              lambda e: e.dbos("pg", "w1", 2000), rate, ">= 6"),
    "w1-pg-20k": ("w1 Postgres, n = 20,000, against DBOS", lambda e: e.embedded("pg", "w1", 20000, DBOS_PG_CONC),
                  lambda e: e.dbos("pg", "w1", 20000), rate, ">= 6"),
    "w1-sqlite": ("w1 SQLite, n = 2,000, against DBOS on SQLite", lambda e: e.embedded("sqlite", "w1", 2000),
                  lambda e: e.dbos("sqlite", "w1", 2000), rate, ">= 10"),
    "w3-pg": ("w3 Postgres p50, DBOS's over Trellis's", lambda e: e.embedded("pg", "w3", 200),
              lambda e: e.dbos("pg", "w3", 200), p50, "> 1"),
    "w5-pg": ("w5 Postgres, 20,000 jobs, against River", lambda e: e.embedded("pg", "w5", 20000),
              lambda e: e.river("w5", 20000), rate, ">= 2"),
    "w5-sqlite": ("w5 SQLite (this build), jobs/s", lambda e: e.embedded("sqlite", "w5", 20000), None, rate,
                  ">= 40000"),
    "server-w1-sqlite": ("w1 SQLite, n = 20,000, through a server over embedded",
                         lambda e: e.server("sqlite", "w1", 20000), lambda e: e.embedded("sqlite", "w1", 20000),
                         rate, ">= 0.75"),
    "server-w1-pg": ("w1 Postgres, n = 20,000, through a server over embedded",
                     lambda e: e.server("pg", "w1", 20000), lambda e: e.embedded("pg", "w1", 20000),
                     rate, ">= 0.75"),
    "server-w3-sqlite": ("w3 SQLite p50, through a server over embedded", lambda e: e.server("sqlite", "w3", 1000),
                         lambda e: e.embedded("sqlite", "w3", 1000), p50, "<= 1.5"),
    "server-w3-pg": ("w3 Postgres p50, through a server over embedded", lambda e: e.server("pg", "w3", 1000),
                     lambda e: e.embedded("pg", "w3", 1000), p50, "<= 1.5"),
}


def build(env, peers):
    go = shutil.which("go") or sys.exit("ratios: go is not on PATH")
    subprocess.run([go, "build", "-o", env.trellis, "./cmd/trellis"], cwd=ROOT, check=True)
    for peer in ("dbos", "river"):
        if not os.path.isdir(os.path.join(peers, peer)):
            sys.exit(f"ratios: no {peer} harness in {peers} (--peers names the folder of the peers' harnesses)")
        src = os.path.join(env.tmp, peer + "-src")
        shutil.copytree(os.path.join(peers, peer), src)  # the peers' folder may be read-only
        subprocess.run([go, "build", "-o", os.path.join(env.tmp, peer + "-bench"), "."], cwd=src, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(PAIRS), help="pairs, comma-separated: " + ", ".join(PAIRS))
    ap.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
    ap.add_argument("--peers", default=os.path.join(ROOT, "..", "shared", "peers"))
    args = ap.parse_args()
    names = [x for x in args.only.split(",") if x]
    for x in names:
        if x not in PAIRS:
            sys.exit(f"ratios: unknown pair {x!r}; the pairs: {', '.join(PAIRS)}")
    if args.rounds < 1:
        sys.exit("ratios: --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="trellis-ratios-") as tmp:
        env = Env(args, tmp)
        build(env, args.peers)
        got = {x: [] for x in names}
        for rnd in range(1, args.rounds + 1):
            for x in names:
                title, mine, other, fig, goal = PAIRS[x]
                a = mine(env)
                b = other(env) if other else None
                if b is None:
                    ratio = None
                elif fig is p50:
                    ratio = fig(a) / fig(b) if x.startswith("server") else fig(b) / fig(a)
                else:
                    ratio = fig(a) / fig(b)
                got[x].append((a, b, ratio))
                line = f"round {rnd} {x}: trellis {fig(a):.6g} (cpu {a['_cpu_ms']:.3f} ms)"
                if b is not None:
                    line += f", other {fig(b):.6g} (cpu {b['_cpu_ms']:.3f} ms), ratio {ratio:.2f}"
                print(line, flush=True)
        print()
        for x in names:
            title, _, other, fig, goal = PAIRS[x]
            rows = got[x]
            mine = ", ".join(f"{fig(a):.4g}" for a, _, _ in rows)
            cpu = ", ".join(f"{a['_cpu_ms']:.3f}" for a, _, _ in rows)
            print(f"{x}: {title}\n  trellis {mine} (CPU per unit, all processes: {cpu} ms)")
            if other:
                theirs = ", ".join(f"{fig(b):.4g}" for _, b, _ in rows)
                cpu = ", ".join(f"{b['_cpu_ms']:.3f}" for _, b, _ in rows)
                ratios = ", ".join(f"{r:.2f}" for _, _, r in rows)
                print(f"  other   {theirs} (CPU per unit: {cpu} ms)\n  ratio   {ratios}   goal {goal}")
            else:
                print(f"  goal    {goal}")


if __name__ == "__main__":
    main()
