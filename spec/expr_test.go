package spec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/diag"
)

// exprHead declares a param of every type, an env value and two stages
// ("z" needs "a") that the stage under test, on line 15, may read.
const exprHead = `version: 1
name: typing
params:
  i: {type: int, default: 1}
  f: {type: float, default: 0.5}
  s: {type: string, default: x}
  b: {type: bool, default: true}
  l: {type: list, default: [1]}
  m: {type: map, default: {a: 1}}
  p: {type: path, default: /x}
env: {HOME: /h}
stages:
  a: {uses: gen}
  z: {uses: gen, needs: a}
`

// check parses and validates src as "p.yaml" against the test catalog.
func check(src string) diag.List {
	p, errs := Parse("p.yaml", []byte(src))
	return append(errs, Validate(p, catalog, Options{})...)
}

// TestExpressionTyping runs one stage line at a time against exprHead. A
// problem is expected on line 15 at the column where `at` starts in the line,
// with a message containing msg.
func TestExpressionTyping(t *testing.T) {
	tests := []struct {
		name, line string
		at, msg    string // "" when the line is valid
	}{
		// params, by declared type
		{"int arithmetic", `{uses: use, needs: a, with: {count: "${{ params.i * 2 + 1 }}"}}`, "", ""},
		{"list index and map member", `{uses: use, needs: a, with: {label: "${{ params.l[0] }}-${{ params.m.a }}"}}`, "", ""},
		{"path is a string", `{uses: use, needs: a, with: {label: "${{ params.p + '/data' }}"}}`, "", ""},
		{"string plus int", `{uses: use, needs: a, with: {count: "${{ params.s + 1 }}"}}`, "+ 1", "invalid operation: + (mismatched types string and int)"},
		{"bool and int", `{uses: use, needs: a, with: {label: "${{ params.b && params.i }}"}}`, "&& params.i", "mismatched types bool and int"},
		{"float into integer input", `{uses: use, needs: a, with: {count: "${{ params.f }}"}}`, `"${{ params.f`, "stages.u.with.count: the value of ${{ params.f }} (0.5) does not fit: got number, want integer"},
		{"string into integer input", `{uses: use, needs: a, with: {count: "${{ params.s }}"}}`, `"${{ params.s`, "got string, want integer"},
		{"bool into integer input", `{uses: use, needs: a, with: {count: "${{ params.b }}"}}`, `"${{ params.b`, "got boolean, want integer"},
		{"unknown param", `{uses: use, needs: a, with: {count: "${{ params.epochs }}"}}`, "epochs", `unknown param "epochs"`},
		// cluster
		{"cluster ints and string", `{uses: use, needs: a, with: {count: "${{ cluster.devices * cluster.hosts }}", label: "${{ cluster.rank_table }}"}}`, "", ""},
		{"rank_table is a string", `{uses: use, needs: a, with: {count: "${{ cluster.rank_table }}"}}`, `"${{ cluster`, "got string, want integer"},
		{"unknown cluster field", `{uses: use, needs: a, with: {label: "${{ cluster.nodes }}"}}`, "nodes", `cluster has no "nodes" (it has devices, hosts and rank_table) (did you mean "hosts"?)`},
		{"devices expression of type string", `{uses: use, needs: a, cluster: {devices: "${{ params.s }}"}}`, "params.s", "stages.u.cluster.devices: expected an integer expression, but it is string"},
		{"devices from a needed stage", `{uses: use, needs: a, cluster: {devices: "${{ stages.a.outputs.n }}"}}`, "", ""},
		// env and run
		{"env is a string", `{uses: use, needs: a, with: {label: "${{ env.HOME }}", count: "${{ env.HOME }}"}}`, `"${{ env.HOME }}"}}`, "got string, want integer"},
		{"run fields", `{uses: use, needs: a, with: {label: "${{ run.id }}-${{ run.name }}-${{ run.dir }}"}}`, "", ""},
		{"unknown run field", `{uses: use, needs: a, with: {label: "${{ run.id }}-${{ run.nope }}"}}`, "nope", `run has no "nope" (it has id, name and dir)`},
		{"unknown root", `{uses: use, needs: a, with: {count: "${{ nope.x }}"}}`, "nope", `unknown name "nope": expressions see "params", "cluster", "stages", "env", "run"`},
		// stages.<id>.outputs only for needed stages
		{"output of a needed stage", `{uses: use, needs: a, with: {count: "${{ stages.a.outputs.n }}"}}`, "", ""},
		{"output of a stage needed through another", `{uses: use, needs: z, with: {count: "${{ stages.a.outputs.n }}"}}`, "", ""},
		{"output without needs", `{uses: use, with: {count: "${{ stages.a.outputs.n }}"}}`, "a.outputs", `stage "u" reads stages.a but does not need it: add "a" to its needs`},
		{"own outputs", `{uses: use, needs: a, with: {count: "${{ stages.u.outputs.n }}"}}`, "u.outputs", `stage "u" cannot read its own outputs`},
		{"undeclared output", `{uses: use, needs: a, with: {count: "${{ stages.a.outputs.nn }}"}}`, "nn", `stage "a" has no output "nn" (it declares "dir", "loss", "n") (did you mean "n"?)`},
		{"float output into integer input", `{uses: use, needs: a, with: {count: "${{ stages.a.outputs.loss }}"}}`, `"${{ stages`, "got number, want integer"},
		{"status", `{uses: use, needs: a, with: {label: "${{ stages.a.status }}"}}`, "", ""},
		{"other member of a stage", `{uses: use, needs: a, with: {label: "${{ stages.a.state }}"}}`, "state", `stages.a has no "state" (it has outputs and status)`},
		{"unknown stage", `{uses: use, needs: a, with: {label: "${{ stages.q.outputs.n }}"}}`, "q.outputs", `unknown stage "q" (did you mean "a"?)`},
		// if
		{"boolean if", `{uses: use, needs: a, if: "${{ stages.a.outputs.loss < 2.5 || !params.b }}"}`, "", ""},
		{"int if", `{uses: use, needs: a, if: "${{ params.i }}"}`, "params.i", "stages.u.if: the condition must be a boolean expression, but it is int"},
		{"float if", `{uses: use, needs: a, if: "${{ stages.a.outputs.loss }}"}`, "stages.a", "the condition must be a boolean expression, but it is float64"},
		{"if with text around", `{uses: use, needs: a, if: "x ${{ params.b }}"}`, `"x `, `stages.u.if: must be a single expression "${{ ... }}"`},
		{"constant if", `{uses: use, needs: a, if: true}`, "true", "a constant true is not allowed"},
		// expression syntax
		{"incomplete expression", `{uses: use, needs: a, with: {count: "${{ 1 + }}"}}`, "+ }}", "unexpected token EOF"},
		{"unclosed template", `{uses: use, needs: a, with: {count: "${{ params.i "}}`, "${{", `unclosed "${{": add "}}" after the expression`},
		// values checked against the input schema
		{"literal below the minimum", `{uses: use, needs: a, with: {count: 0}}`, "0}", "stages.u.with.count"},
		{"unknown input", `{uses: use, needs: a, with: {cnt: 1}}`, "cnt", `unknown input "cnt" for use`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := "  u: " + tt.line
			errs := check(exprHead + line + "\n")
			if tt.msg == "" {
				if len(errs) != 0 {
					t.Fatalf("unexpected problems:\n%v", lines(errs))
				}
				return
			}
			col := strings.Index(line, tt.at) + 1
			if col == 0 {
				t.Fatalf("bad test: %q is not in the line", tt.at)
			}
			want := fmt.Sprintf("p.yaml:15:%d", col)
			if len(errs) != 1 || errs[0].Where() != want || !strings.Contains(errs[0].Message, tt.msg) || errs[0].Severity != diag.Error {
				t.Fatalf("got:\n%s\nwant one error at %s containing %q", lines(errs), want, tt.msg)
			}
		})
	}
}

// TestPipelineLevelExpressions: before any stage runs only params, cluster,
// env and run exist.
func TestPipelineLevelExpressions(t *testing.T) {
	src := strings.Replace(exprHead, "env: {HOME: /h}\n", "env: {HOME: /h}\ncluster: {devices: \"${{ stages.a.outputs.n }}\"}\n", 1)
	errs := check(src)
	line := `cluster: {devices: "${{ stages.a.outputs.n }}"}`
	want := fmt.Sprintf("p.yaml:12:%d", strings.Index(line, "a.outputs")+1)
	if len(errs) != 1 || errs[0].Where() != want || !strings.Contains(errs[0].Message, "stage outputs are not available here") {
		t.Fatalf("got:\n%s\nwant one error at %s", lines(errs), want)
	}
	ok := strings.Replace(src, "stages.a.outputs.n", "params.i * 2", 1)
	if errs := check(ok); len(errs) != 0 {
		t.Fatalf("devices from a param: %s", lines(errs))
	}
}

func lines(l diag.List) string {
	var b strings.Builder
	for _, d := range l {
		fmt.Fprintf(&b, "  %s\n", d)
	}
	return b.String()
}

// TestEnvNamesSetSomewhere: env.NAME reads the stage's env, the
// pipeline's, then Options.Env; a name set in none is a warning at the
// name, and no warning when Options.Env is not given.
func TestEnvNamesSetSomewhere(t *testing.T) {
	line := `  u: {uses: use, needs: a, env: {OWN: o}, with: {label: "${{ env.OWN }}${{ env.HOME }}${{ env.PATHX }}${{ env.NOPE }}"}}`
	p, errs := Parse("p.yaml", []byte(exprHead+line+"\n"))
	errs = append(errs, Validate(p, catalog, Options{Env: map[string]string{"PATHX": "/bin"}})...)
	want := fmt.Sprintf("p.yaml:15:%d", strings.Index(line, "NOPE")+1)
	if len(errs) != 1 || errs[0].Where() != want || errs[0].Severity != diag.Warning ||
		!strings.Contains(errs[0].Message, "env.NOPE is not set in the spec's env or the environment") {
		t.Fatalf("got:\n%s\nwant one warning at %s about env.NOPE", lines(errs), want)
	}
	if errs := check(exprHead + line + "\n"); len(errs) != 0 {
		t.Fatalf("without Options.Env: %s", lines(errs))
	}
}
