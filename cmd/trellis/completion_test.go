package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// completionScript writes `trellis completion SHELL` to a file and returns its path.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	res := trellisCmd(t, "completion", shell).ok(t)
	path := filepath.Join(t.TempDir(), "trellis."+shell)
	if err := os.WriteFile(path, []byte(res.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The bash script, sourced in a real bash, registers itself and completes
// commands, subcommands and flags as bash asks it to (COMP_WORDS, COMP_CWORD).
func TestCompletionBash(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script := completionScript(t, "bash")
	out, err := exec.Command(bash, "-c", "source "+script+" && complete -p trellis").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "complete -o default -F _trellis trellis" {
		t.Fatalf("complete -p trellis: %v %q", err, out)
	}
	for _, c := range []struct {
		line string // the words typed; the last is completed ("" for a new word)
		want []string
	}{
		{"trellis ru", []string{"runs"}},
		{"trellis co", []string{"conformance", "completion"}},
		{"trellis runs ", []string{"start", "list", "get", "history", "watch", "result", "cancel", "resume", "send-event", "reset", "delete"}},
		{"trellis runs re", []string{"result", "resume", "reset"}},
		{"trellis runs list --st", []string{"--status", "--store"}},
		{"trellis runs get run-1 --store sqlite:///x.db --na", []string{"--namespace"}},
		{"trellis runs watch --store /tmp/x --a", []string{"--after"}},
		{"trellis runs list --json --cu", []string{"--cursor"}},
		{"trellis schedules ", []string{"create", "list", "get", "update", "pause", "resume", "trigger", "backfill", "delete"}},
		{"trellis schedules create --c", []string{"--catchup-window", "--cron"}},
		{"trellis dev --", []string{"--access-log", "--store", "--ui"}},
		{"trellis version --", []string{"--json"}},
		{"trellis completion ", []string{"bash", "zsh", "fish"}},
		{"trellis help q", []string{"queues"}},
		{"trellis tokens create --g", []string{"--grant"}},
		{"trellis queues pause --store x --", nil}, // every flag of queues pause
	} {
		words := strings.Split(c.line, " ")
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, strconv.Quote(w))
		}
		sh := "source " + script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_trellis\nprintf '%s\\n' \"${COMPREPLY[@]}\""
		out, err := exec.Command(bash, "-c", sh).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", c.line, err, out)
		}
		got := strings.Fields(string(out))
		if c.want == nil {
			if !slices.Contains(got, "--store") || !slices.Contains(got, "--namespace") || !slices.Contains(got, "--json") {
				t.Errorf("%q: completed %q", c.line, got)
			}
			continue
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%q: completed %q, want %q", c.line, got, want)
		}
	}
}

// zsh and fish: the scripts parse (when the shells are here), fish completes
// as bash does, and each script names every command, subcommand and flag.
func TestCompletionZshFish(t *testing.T) {
	t.Parallel()
	tree, err := commandTree(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, shell := range []string{"zsh", "fish"} {
		script := completionScript(t, shell)
		b, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, c := range tree.subs {
			contains(t, shell+" script", text, " "+c.name)
			for _, s := range c.subs {
				if shell == "zsh" {
					contains(t, "zsh script", text, "'"+s.name+":", "\n        "+s.name+") opts=(")
				} else {
					contains(t, "fish script", text, "'__trellis_at "+c.name+"' -a "+s.name+" ")
				}
				for _, f := range s.flags {
					if shell == "zsh" {
						contains(t, "zsh script", text, "--"+f.name)
					} else {
						contains(t, "fish script", text, "'__trellis_in "+c.name+" "+s.name+"' -l "+f.name)
					}
				}
			}
		}
		bin, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("no %s here: its script is checked by content only", shell)
			continue
		}
		if out, err := exec.Command(bin, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
		if shell != "fish" {
			continue
		}
		for line, want := range map[string][]string{
			"trellis ru":                            {"runs"},
			"trellis runs re":                       {"result", "resume", "reset"},
			"trellis runs list --store /tmp/x --st": {"--status", "--store"},
			"trellis completion ":                   {"bash", "fish", "zsh"},
		} {
			out, err := exec.Command(bin, "-c", "source "+script+"; complete -C "+strconv.Quote(line)).CombinedOutput()
			if err != nil {
				t.Fatalf("fish complete -C %q: %v\n%s", line, err, out)
			}
			var got []string
			for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
				got = append(got, strings.Split(l, "\t")[0]) // the completion, then its description
			}
			slices.Sort(got)
			if want := slices.Sorted(slices.Values(want)); !slices.Equal(got, want) {
				t.Errorf("fish %q: completed %q, want %q", line, got, want)
			}
		}
	}
	if res := trellisCmd(t, "completion", "tcsh"); res.code != exitUsage || !strings.Contains(res.stderr, `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "completion"); res.code != exitUsage {
		t.Errorf("completion without a shell: exit %d %q", res.code, res.stderr)
	}
}

// The completion's commands are the dispatchers': every switch on a command
// or subcommand name in this package lists exactly the names of one command
// group of the tree (or of trellis itself), so a command added to a switch but
// not to its help (from which completion reads) fails here.
func TestCompletionCoversDispatch(t *testing.T) {
	t.Parallel()
	tree, err := commandTree(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string][]string{"trellis": namesOf(tree.subs)} // group -> its names, sorted
	for _, c := range tree.subs {
		if len(c.subs) > 0 {
			groups[c.name] = namesOf(c.subs)
		}
	}
	aliases := []string{"help", "-h", "-help", "--help", "--version"}
	seen := map[string]bool{}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			group, ok := dispatcherOf(sw)
			if !ok {
				return true
			}
			var cases []string
			for _, st := range sw.Body.List {
				for _, e := range st.(*ast.CaseClause).List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						if !slices.Contains(aliases, s) {
							cases = append(cases, s)
						}
					}
				}
			}
			slices.Sort(cases)
			want := slices.DeleteFunc(slices.Clone(groups[group]), func(s string) bool { return s == "help" })
			if !slices.Equal(cases, want) {
				t.Errorf("%s: the dispatcher of %q knows %q, its help (and so completion) lists %q", fset.Position(sw.Pos()), group, cases, want)
			}
			seen[group] = true
			return true
		})
	}
	for g := range groups {
		if !seen[g] {
			t.Errorf("no dispatcher found for %q", g)
		}
	}
}

func namesOf(nodes []cmdNode) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.name
	}
	slices.Sort(out)
	return out
}

// dispatcherOf returns the command group whose names sw dispatches on: the
// switch whose default answers "GROUP: unknown subcommand" ("unknown command":
// trellis itself).
func dispatcherOf(sw *ast.SwitchStmt) (group string, ok bool) {
	for _, st := range sw.Body.List {
		cc := st.(*ast.CaseClause)
		if cc.List != nil {
			continue
		}
		ast.Inspect(cc, func(n ast.Node) bool {
			lit, isLit := n.(*ast.BasicLit)
			if !isLit || lit.Kind != token.STRING {
				return true
			}
			s, _ := strconv.Unquote(lit.Value)
			if g, _, found := strings.Cut(s, ": unknown subcommand"); found {
				group, ok = g, true
			} else if strings.HasPrefix(s, "unknown command") {
				group, ok = "trellis", true
			}
			return true
		})
	}
	return group, ok
}
