// Package determinism is a go vet-style analyzer for Trellis workflows: it
// reports, inside workflow functions, the Go constructs that make a replay take
// another path than the first run (the wall clock, random numbers, goroutines,
// select statements, map iteration order, the environment), each with the
// durable alternative Trellis offers.
//
// A workflow function is any function (declared or literal) whose first
// parameter is a *trellis.Context: the functions given to trellis.NewWorkflow and
// the helpers they call with their context. Inside one, the analyzer looks at
// everything that runs as part of the workflow, including function literals it
// calls in place, but not the step functions given to trellis.Step,
// trellis.Async or trellis.TxStep (nor any function literal whose first
// parameter is a context.Context): a step's result is recorded, so a step may
// read the clock or draw random numbers.
//
// Run it with the trellis-vet command:
//
//	go install github.com/trellis-dev/trellis/cmd/trellis-vet@latest
//	go vet -vettool=$(which trellis-vet) ./...
//
// A report that is known to be harmless (a map ranged over only to sum its
// values, say) is silenced by a comment on the line or the line above:
//
//	//trellis:deterministic (the sum does not depend on the order)
//
// See docs/determinism.md.
package determinism

import (
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// trellisPath is the import path of the Trellis package whose Context marks a
// workflow function.
const trellisPath = "github.com/trellis-dev/trellis"

// Directive silences a report on its line or the line below.
const Directive = "//trellis:deterministic"

// Analyzer reports nondeterministic constructs in Trellis workflow functions.
var Analyzer = &analysis.Analyzer{
	Name:     "determinism",
	Doc:      "report nondeterministic code (time.Now, math/rand, goroutines, select, map ranges, os.Getenv) in Trellis workflow functions",
	URL:      "https://github.com/trellis-dev/trellis/blob/main/docs/determinism.md",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// stepFuncs are the functions of package trellis whose function argument is a
// step: it runs outside the replay, its result recorded.
var stepFuncs = map[string]bool{"Step": true, "Async": true, "TxStep": true}

// funcAdvice names, for a function of the standard library, why it breaks a
// replay and what to use instead. The key is "importpath.Name".
var funcAdvice = map[string]string{
	"time.Now":       "time.Now in a workflow reads the wall clock, which differs on replay: use wc.Now()",
	"time.Since":     "time.Since in a workflow reads the wall clock, which differs on replay: use wc.Now().Sub(t)",
	"time.Until":     "time.Until in a workflow reads the wall clock, which differs on replay: use t.Sub(wc.Now())",
	"time.Sleep":     "time.Sleep in a workflow blocks the worker and is not recorded: use wc.Sleep(d), a durable timer",
	"time.After":     "time.After in a workflow is a wall-clock timer, not recorded: use wc.NewTimer(d) (or wc.Sleep)",
	"time.AfterFunc": "time.AfterFunc in a workflow runs a function on another goroutine, outside the replay: use wc.NewTimer(d) and trellis.Select",
	"time.NewTimer":  "time.NewTimer in a workflow is a wall-clock timer, not recorded: use wc.NewTimer(d)",
	"time.NewTicker": "time.NewTicker in a workflow is a wall-clock timer, not recorded: use wc.NewTimer(d) in a loop",
	"time.Tick":      "time.Tick in a workflow is a wall-clock timer, not recorded: use wc.NewTimer(d) in a loop",

	"os.Getenv":    "os.Getenv in a workflow may read another value on replay (another process, another host): pass the value in the input, or read it in a trellis.Step",
	"os.LookupEnv": "os.LookupEnv in a workflow may read another value on replay (another process, another host): pass the value in the input, or read it in a trellis.Step",
	"os.Environ":   "os.Environ in a workflow may read other values on replay (another process, another host): pass the values in the input, or read them in a trellis.Step",
	"os.Hostname":  "os.Hostname in a workflow differs on replay by another worker: read it in a trellis.Step",
	"os.Getpid":    "os.Getpid in a workflow differs on replay by another process: read it in a trellis.Step",

	"crypto/rand.Read": "crypto/rand in a workflow draws other bytes on replay: use wc.Random() or wc.UUID(), or draw them in a trellis.Step",
	"crypto/rand.Int":  "crypto/rand in a workflow draws another number on replay: use wc.Random(), or draw it in a trellis.Step",
	"crypto/rand.Text": "crypto/rand in a workflow draws another text on replay: use wc.UUID(), or draw it in a trellis.Step",

	"github.com/google/uuid.New":       "uuid.New in a workflow makes another UUID on replay: use wc.UUID()",
	"github.com/google/uuid.NewString": "uuid.NewString in a workflow makes another UUID on replay: use wc.UUID()",
	"github.com/google/uuid.NewRandom": "uuid.NewRandom in a workflow makes another UUID on replay: use wc.UUID()",
}

// randPackages are the packages any function of which draws random numbers.
var randPackages = map[string]bool{"math/rand": true, "math/rand/v2": true}

func run(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	filter := []ast.Node{(*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)}
	ins.Preorder(filter, func(n ast.Node) {
		var ft *ast.FuncType
		var body *ast.BlockStmt
		switch f := n.(type) {
		case *ast.FuncDecl:
			ft, body = f.Type, f.Body
		case *ast.FuncLit:
			ft, body = f.Type, f.Body
		}
		if body == nil || !isWorkflowFunc(pass, ft) {
			return
		}
		c := checker{pass: pass, file: fileOf(pass, n.Pos())}
		c.walk(body)
	})
	return nil, nil
}

type checker struct {
	pass *analysis.Pass
	file *ast.File
}

// walk reports what it finds under n, a part of a workflow function's body,
// without entering the nested functions that are steps or workflow functions of
// their own (those are checked on their own, or not at all).
func (c checker) walk(n ast.Node) {
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			// A nested workflow function is checked on its own (run visits
			// it), a function with a context.Context first is a step.
			return !isWorkflowFunc(c.pass, n.Type) && !hasContextFirst(c.pass, n.Type)
		case *ast.CallExpr:
			if c.isStepCall(n) {
				// The workflow's own arguments (wc, the name) are not worth
				// walking; the function argument is a step.
				for _, a := range n.Args {
					if _, ok := ast.Unparen(a).(*ast.FuncLit); !ok {
						c.walk(a)
					}
				}
				return false
			}
			c.call(n)
		case *ast.GoStmt:
			c.report(n.Pos(), "a go statement in a workflow runs code outside the replay, in an order that differs from run to run: run steps concurrently with trellis.Async, or children with trellis.ChildAsync")
		case *ast.SelectStmt:
			c.report(n.Pos(), "a select statement in a workflow picks among ready cases at random and waits on channels the replay does not record: wait on timers, events and futures with trellis.Select")
		case *ast.RangeStmt:
			if t := c.pass.TypesInfo.TypeOf(n.X); t != nil {
				if _, ok := t.Underlying().(*types.Map); ok {
					c.report(n.Pos(), "ranging over a map in a workflow visits its keys in an order that differs on replay: range over the sorted keys (slices.Sorted(maps.Keys(m)))")
					break
				}
			}
			// maps.Keys, maps.Values and maps.All iterate in the map's order.
			if call, ok := ast.Unparen(n.X).(*ast.CallExpr); ok {
				if fn, ok := typeutilCallee(c.pass.TypesInfo, call).(*types.Func); ok && fn.Pkg() != nil &&
					fn.Pkg().Path() == "maps" && (fn.Name() == "Keys" || fn.Name() == "Values" || fn.Name() == "All") {
					c.report(n.Pos(), "ranging over maps.%s in a workflow visits the map in an order that differs on replay: range over the sorted keys (slices.Sorted(maps.Keys(m)))", fn.Name())
				}
			}
		}
		return true
	})
}

// call reports a call of a function that reads the clock, randomness or the
// environment.
func (c checker) call(call *ast.CallExpr) {
	fn, ok := typeutilCallee(c.pass.TypesInfo, call).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return
	}
	if sig, ok := fn.Type().(*types.Signature); ok && sig.Recv() != nil {
		// A method: a *rand.Rand's methods are deterministic given its
		// seed, and creating the generator (rand.New) is what is reported.
		return
	}
	path := fn.Pkg().Path()
	if randPackages[path] {
		c.report(call.Pos(), "%s.%s in a workflow draws another number on replay: use wc.Random(), or draw it in a trellis.Step", fn.Pkg().Name(), fn.Name())
		return
	}
	if advice, ok := funcAdvice[path+"."+fn.Name()]; ok {
		c.report(call.Pos(), "%s", advice)
	}
}

// isStepCall reports whether call is trellis.Step, trellis.Async or
// trellis.TxStep (with or without type arguments).
func (c checker) isStepCall(call *ast.CallExpr) bool {
	fn, ok := typeutilCallee(c.pass.TypesInfo, call).(*types.Func)
	return ok && fn.Pkg() != nil && fn.Pkg().Path() == trellisPath && stepFuncs[fn.Name()]
}

// report reports a diagnostic at pos unless the directive silences it.
func (c checker) report(pos token.Pos, format string, args ...any) {
	if c.silenced(pos) {
		return
	}
	c.pass.Reportf(pos, format, args...)
}

// silenced reports whether a //trellis:deterministic comment is on pos's line
// or on the line above it.
func (c checker) silenced(pos token.Pos) bool {
	if c.file == nil {
		return false
	}
	line := c.pass.Fset.Position(pos).Line
	for _, g := range c.file.Comments {
		for _, cm := range g.List {
			if !strings.HasPrefix(cm.Text, Directive) {
				continue
			}
			if l := c.pass.Fset.Position(cm.Pos()).Line; l == line || l == line-1 {
				return true
			}
		}
	}
	return false
}

// isWorkflowFunc reports whether a function of type ft takes a *trellis.Context
// first.
func isWorkflowFunc(pass *analysis.Pass, ft *ast.FuncType) bool {
	t := firstParamType(pass, ft)
	if t == nil {
		return false
	}
	p, ok := t.(*types.Pointer)
	return ok && isNamed(p.Elem(), trellisPath, "Context")
}

// hasContextFirst reports whether a function of type ft takes a
// context.Context first: a step function.
func hasContextFirst(pass *analysis.Pass, ft *ast.FuncType) bool {
	t := firstParamType(pass, ft)
	return t != nil && isNamed(t, "context", "Context")
}

func firstParamType(pass *analysis.Pass, ft *ast.FuncType) types.Type {
	if ft.Params == nil || len(ft.Params.List) == 0 {
		return nil
	}
	return pass.TypesInfo.TypeOf(ft.Params.List[0].Type)
}

func isNamed(t types.Type, path, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Obj()
	return obj.Name() == name && obj.Pkg() != nil && obj.Pkg().Path() == path
}

// typeutilCallee returns the function or method a call calls statically, or
// nil; generic functions give their origin (Step[T] gives Step).
func typeutilCallee(info *types.Info, call *ast.CallExpr) types.Object {
	fun := ast.Unparen(call.Fun)
	switch f := fun.(type) {
	case *ast.IndexExpr:
		fun = f.X
	case *ast.IndexListExpr:
		fun = f.X
	}
	var id *ast.Ident
	switch f := ast.Unparen(fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	obj := info.Uses[id]
	if fn, ok := obj.(*types.Func); ok {
		return fn.Origin()
	}
	return nil
}

// fileOf returns the file of pass that holds pos.
func fileOf(pass *analysis.Pass, pos token.Pos) *ast.File {
	for _, f := range pass.Files {
		if f.FileStart <= pos && pos <= f.FileEnd {
			return f
		}
	}
	return nil
}
