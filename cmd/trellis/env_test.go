package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
)

// TRELLIS_STORE and TRELLIS_NAMESPACE stand in for --store and --namespace; the
// flags win over them. (Not parallel: it sets the environment.)
func TestStoreAndNamespaceFromEnvironment(t *testing.T) {
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	t.Setenv(envStore, url)
	t.Setenv(envNamespace, "team-a")

	res := trellisCmd(t, "runs", "start", "greet", "--input", `"ada"`, "--id", "g-1").ok(t)
	contains(t, "start", res.stdout, "Namespace:", "team-a")
	res = trellisCmd(t, "runs", "list").ok(t)
	contains(t, "list from env", res.stdout, "g-1", "greet")
	if res := trellisCmd(t, "runs", "list", "--namespace", "default").ok(t); res.stdout != "no runs\n" {
		t.Errorf("--namespace default lists runs of team-a:\n%s", res.stdout)
	}
	res = trellisCmd(t, "runs", "get", "g-1", "--store", url, "--namespace", "team-a").ok(t)
	contains(t, "get with flags", res.stdout, "team-a")
	if res := trellisCmd(t, "runs", "get", "g-1", "--store", "sqlite:///nonexistent/t.db"); res.code != exitNotFound ||
		!strings.Contains(res.stderr, "no store at /nonexistent/t.db") {
		t.Errorf("--store does not override TRELLIS_STORE: exit %d %q", res.code, res.stderr)
	}
	trellisCmd(t, "runs", "cancel", "g-1").ok(t)
	if res := trellisCmd(t, "approvals", "list").ok(t); strings.Contains(res.stdout, "g-1") {
		t.Errorf("approvals list: %s", res.stdout)
	}

	c := openClientIn(t, url, "team-a")
	defer c.Close()
	run, err := c.Get(ctxT(t), "g-1")
	if err != nil || run.Namespace != "team-a" || run.Status != trellis.StatusCancelled {
		t.Fatalf("run in team-a: %+v %v", run, err)
	}

	t.Setenv(envStore, "")
	if res := trellisCmd(t, "runs", "list"); res.code != exitUsage || !strings.Contains(res.stderr, "--store or --server is required, or set TRELLIS_STORE or TRELLIS_SERVER") {
		t.Errorf("no store at all: exit %d %q", res.code, res.stderr)
	}
}

// openClientIn opens a client without worker on url, in namespace ns.
func openClientIn(t *testing.T, url, ns string) *trellis.Client {
	t.Helper()
	c, err := trellis.Open(ctxT(t), trellis.Config{Store: url, Namespace: ns, Worker: trellis.WorkerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// trellis -h lists every environment variable the command line reads: each
// os.Getenv and os.LookupEnv of this package's code, by literal or constant.
func TestHelpListsEveryEnvironmentVariable(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{} // constant name -> its string value
	var read []ast.Expr           // the arguments of Getenv and LookupEnv
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[id.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv") {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" && len(n.Args) == 1 {
						read = append(read, n.Args[0])
					}
				}
			}
			return true
		})
	}
	help := trellisCmd(t, "-h").ok(t).stdout
	_, env, _ := strings.Cut(help, "\nEnvironment:\n")
	env, _, _ = strings.Cut(env, "\n\n")
	var names []string
	for _, arg := range read {
		var name string
		switch a := arg.(type) {
		case *ast.BasicLit:
			name, _ = strconv.Unquote(a.Value)
		case *ast.Ident:
			name = consts[a.Name]
		}
		if name == "" {
			t.Errorf("%s: an environment variable read by a name this test cannot resolve", fset.Position(arg.Pos()))
			continue
		}
		names = append(names, name)
		if !strings.Contains(env, "\n  "+name+" ") && !strings.HasPrefix(env, "  "+name+" ") {
			t.Errorf("trellis -h does not list %s under Environment:\n%s", name, env)
		}
	}
	for _, want := range []string{envStore, envServer, envToken, envNamespace, envUIKey, "GOGC"} {
		if !slices.Contains(names, want) {
			t.Errorf("the test found no read of %s: %q", want, names)
		}
	}
}
