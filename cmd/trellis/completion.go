package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

const completionAbout = `Print a shell completion script for trellis: its commands, subcommands and flags.

  bash:  source <(trellis completion bash)         (or save it in
         /etc/bash_completion.d/trellis, or ~/.local/share/bash-completion/completions/trellis)
  zsh:   source <(trellis completion zsh)          (or save it as _trellis in a directory
         of $fpath, after compinit)
  fish:  trellis completion fish > ~/.config/fish/completions/trellis.fish

The script is generated from the commands' own help, so it lists what this
binary has.`

// completionShells are the shells trellis completion writes scripts for.
var completionShells = []string{"bash", "zsh", "fish"}

func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("completion", "completion bash|zsh|fish", completionAbout, stderr)
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) != 1:
		return usagef(fs, "completion: want one shell: bash, zsh or fish")
	}
	tree, err := commandTree(ctx)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "bash":
		return writeBashCompletion(stdout, tree)
	case "zsh":
		return writeZshCompletion(stdout, tree)
	case "fish":
		return writeFishCompletion(stdout, tree)
	}
	return usagef(fs, "completion: unknown shell %q: want bash, zsh or fish", pos[0])
}

// cmdNode is a command, or a subcommand, as completion knows it.
type cmdNode struct {
	name, about string
	flags       []flagSpec // a leaf's flags
	subs        []cmdNode  // a group's subcommands
	args        []string   // the words its positional argument takes (completion, help)
}

type flagSpec struct {
	name   string // without the dashes
	valued bool   // takes a value (--store URL), or is a switch (--json)
}

// commandTree reads the commands, subcommands and flags from what the commands
// answer to -h, so that completion lists what the binary has and cannot drift
// from it: "trellis -h"'s Commands, a group's Subcommands, a leaf's Flags.
func commandTree(ctx context.Context) (cmdNode, error) {
	root := cmdNode{name: "trellis"}
	for _, c := range listSection(mainUsage, "Commands:") {
		node := cmdNode{name: c[0], about: c[1]}
		switch c[0] {
		case "help":
			// answered by the command list below
		case "completion":
			node.args = completionShells
		default:
			text, err := helpText(ctx, c[0])
			if err != nil {
				return root, err
			}
			subs := listSection(text, "Subcommands:")
			if len(subs) == 0 {
				node.flags = usageFlags(text)
			}
			for _, s := range subs {
				subText, err := helpText(ctx, c[0], s[0])
				if err != nil {
					return root, err
				}
				node.subs = append(node.subs, cmdNode{name: s[0], about: s[1], flags: usageFlags(subText)})
			}
		}
		root.subs = append(root.subs, node)
	}
	for i := range root.subs {
		if root.subs[i].name == "help" {
			for _, c := range root.subs {
				root.subs[i].args = append(root.subs[i].args, c.name)
			}
		}
	}
	return root, nil
}

// helpText is what "trellis WORDS... -h" prints.
func helpText(ctx context.Context, words ...string) (string, error) {
	var out bytes.Buffer
	err := dispatch(ctx, append(slices.Clone(words), "-h"), &out, &out)
	var he *helpError
	if !errors.As(err, &he) {
		return "", fmt.Errorf("completion: %q -h answered no help: %v", strings.Join(words, " "), err)
	}
	he.usage(&out)
	return out.String(), nil
}

// listSection parses the list after header ("Commands:", "Subcommands:"):
// lines of a name, two spaces or more and a description, up to a blank line.
func listSection(text, header string) [][2]string {
	_, list, ok := strings.Cut(text, "\n"+header+"\n")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var out [][2]string
	for line := range strings.SplitSeq(list, "\n") {
		name, about, _ := strings.Cut(strings.TrimSpace(line), "  ")
		if name != "" {
			out = append(out, [2]string{name, strings.TrimSpace(about)})
		}
	}
	return out
}

// flagLine is a flag as printFlags writes it: "  --name" or "  --name value".
var flagLine = regexp.MustCompile(`^  --([a-z0-9][a-z0-9-]*)( \S+)?$`)

func usageFlags(text string) []flagSpec {
	var out []flagSpec
	lines := bufio.NewScanner(strings.NewReader(text))
	for lines.Scan() {
		if m := flagLine.FindStringSubmatch(lines.Text()); m != nil {
			out = append(out, flagSpec{name: m[1], valued: m[2] != ""})
		}
	}
	return out
}

// valuedFlags are the flags that take a value, in any command: the word after
// one is its value, not a command.
func valuedFlags(tree cmdNode) []string {
	var out []string
	var walk func(n cmdNode)
	walk = func(n cmdNode) {
		for _, f := range n.flags {
			if f.valued && !slices.Contains(out, "--"+f.name) {
				out = append(out, "--"+f.name, "-"+f.name)
			}
		}
		for _, s := range n.subs {
			walk(s)
		}
	}
	walk(tree)
	return out
}

func flagWords(flags []flagSpec) string {
	words := make([]string, len(flags))
	for i, f := range flags {
		words[i] = "--" + f.name
	}
	return strings.Join(words, " ")
}

func names(nodes []cmdNode) string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.name
	}
	return strings.Join(out, " ")
}

func writeBashCompletion(w io.Writer, tree cmdNode) error {
	var b strings.Builder
	b.WriteString(`# bash completion for trellis (trellis completion bash)
_trellis() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    local valued=" ` + strings.Join(valuedFlags(tree), " ") + ` "
    local cmd="" sub="" skip="" i w opts=""
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if [[ -n $skip ]]; then skip=""; continue; fi
        case "$w" in
        --*=*) continue ;;
        -*) [[ $valued == *" $w "* ]] && skip=1; continue ;;
        esac
        if [[ -z $cmd ]]; then cmd="$w"; elif [[ -z $sub ]]; then sub="$w"; fi
    done
    if [[ -n $skip ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "` + names(tree.subs) + `" -- "$cur"))
        return
    fi
    case "$cmd" in
`)
	for _, c := range tree.subs {
		fmt.Fprintf(&b, "    %s)\n", c.name)
		switch {
		case len(c.args) > 0:
			fmt.Fprintf(&b, "        [[ -z $sub ]] && COMPREPLY=($(compgen -W %q -- \"$cur\"))\n        return\n        ;;\n", strings.Join(c.args, " "))
		case len(c.subs) > 0:
			fmt.Fprintf(&b, "        if [[ -z $sub ]]; then\n            COMPREPLY=($(compgen -W %q -- \"$cur\"))\n            return\n        fi\n", names(c.subs))
			b.WriteString("        case \"$sub\" in\n")
			for _, s := range c.subs {
				fmt.Fprintf(&b, "        %s) opts=%q ;;\n", s.name, flagWords(s.flags))
			}
			b.WriteString("        esac\n        ;;\n")
		default:
			fmt.Fprintf(&b, "        opts=%q\n        ;;\n", flagWords(c.flags))
		}
	}
	b.WriteString(`    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    fi
}
complete -o default -F _trellis trellis
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// zshQuote quotes s for zsh in single quotes ('\” for a quote).
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// described is name:about pairs, as _describe takes them (a colon in a
// name escaped).
func described(nodes []cmdNode) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = zshQuote(strings.ReplaceAll(n.name, ":", `\:`) + ":" + n.about)
	}
	return strings.Join(parts, " ")
}

func writeZshCompletion(w io.Writer, tree cmdNode) error {
	var b strings.Builder
	b.WriteString(`#compdef trellis
# zsh completion for trellis (trellis completion zsh)
_trellis() {
    local -a valued=(` + strings.Join(valuedFlags(tree), " ") + `)
    local -a items opts
    local cmd="" sub="" skip="" i w
    for ((i = 2; i < CURRENT; i++)); do
        w=${words[i]}
        if [[ -n $skip ]]; then skip=""; continue; fi
        case $w in
        --*=*) continue ;;
        -*) (( ${valued[(Ie)$w]} )) && skip=1; continue ;;
        esac
        if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi
    done
    if [[ -n $skip ]]; then
        _files
        return
    fi
    if [[ -z $cmd ]]; then
        items=(` + described(tree.subs) + `)
        _describe -t commands 'trellis command' items
        return
    fi
    case $cmd in
`)
	for _, c := range tree.subs {
		fmt.Fprintf(&b, "    %s)\n", c.name)
		switch {
		case len(c.args) > 0:
			fmt.Fprintf(&b, "        [[ -z $sub ]] && compadd -- %s\n        return\n        ;;\n", strings.Join(c.args, " "))
		case len(c.subs) > 0:
			fmt.Fprintf(&b, "        if [[ -z $sub ]]; then\n            items=(%s)\n            _describe -t commands 'trellis %s subcommand' items\n            return\n        fi\n", described(c.subs), c.name)
			b.WriteString("        case $sub in\n")
			for _, s := range c.subs {
				fmt.Fprintf(&b, "        %s) opts=(%s) ;;\n", s.name, flagWords(s.flags))
			}
			b.WriteString("        esac\n        ;;\n")
		default:
			fmt.Fprintf(&b, "        opts=(%s)\n        ;;\n", flagWords(c.flags))
		}
	}
	b.WriteString(`    esac
    if [[ $PREFIX == -* ]]; then
        compadd -- $opts
    else
        _files
    fi
}
if [[ "${funcstack[1]}" == _trellis ]]; then
    _trellis "$@"
else
    compdef _trellis trellis
fi
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for fish in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func writeFishCompletion(w io.Writer, tree cmdNode) error {
	var b strings.Builder
	b.WriteString(`# fish completion for trellis (trellis completion fish)
set -g __trellis_valued ` + strings.Join(valuedFlags(tree), " ") + `

# __trellis_words prints the command line's words that are not flags or their
# values: the command and the subcommand first.
function __trellis_words
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l skip 0
    for t in $tokens
        if test $skip = 1
            set skip 0
            continue
        end
        switch $t
            case '--*=*'
                continue
            case '-*'
                contains -- $t $__trellis_valued; and set skip 1
                continue
        end
        echo $t
    end
end

# __trellis_at WORDS: the command line's words are WORDS exactly.
function __trellis_at
    set -l words (__trellis_words)
    test "$words" = "$argv"
end

# __trellis_in WORDS: the command line's words begin with WORDS.
function __trellis_in
    set -l words (__trellis_words)
    test (count $words) -ge (count $argv); or return 1
    for i in (seq (count $argv))
        test "$words[$i]" = "$argv[$i]"; or return 1
    end
end

complete -c trellis -f
`)
	for _, c := range tree.subs {
		fmt.Fprintf(&b, "complete -c trellis -n '__trellis_at' -a %s -d %s\n", c.name, fishQuote(c.about))
	}
	for _, c := range tree.subs {
		for _, a := range c.args {
			fmt.Fprintf(&b, "complete -c trellis -n '__trellis_at %s' -a %s\n", c.name, a)
		}
		for _, s := range c.subs {
			fmt.Fprintf(&b, "complete -c trellis -n '__trellis_at %s' -a %s -d %s\n", c.name, s.name, fishQuote(s.about))
		}
		for _, f := range c.flags {
			fmt.Fprintf(&b, "complete -c trellis -n '__trellis_in %s' -l %s%s\n", c.name, f.name, fishValued(f))
		}
		for _, s := range c.subs {
			for _, f := range s.flags {
				fmt.Fprintf(&b, "complete -c trellis -n '__trellis_in %s %s' -l %s%s\n", c.name, s.name, f.name, fishValued(f))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fishValued makes a flag that takes a value complete file names after it.
func fishValued(f flagSpec) string {
	if f.valued {
		return " -r -F"
	}
	return ""
}
