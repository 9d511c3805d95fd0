package pipeline

import (
	"fmt"
	"io"
	"strings"

	"github.com/mspipe/mspipe/spec"
)

// Graph is the stage dependency graph of a validated pipeline.
type Graph struct {
	Order      []string            // topological order; ties keep file order
	Needs      map[string][]string // direct needs of each stage
	Dependents map[string][]string // stages that directly need each stage
}

// NewGraph builds the graph. The pipeline must have passed spec.Validate,
// which rejects unknown needs and cycles; NewGraph still reports a cycle
// instead of looping.
func NewGraph(p *spec.Pipeline) (*Graph, error) {
	g := &Graph{Needs: map[string][]string{}, Dependents: map[string][]string{}}
	indeg := map[string]int{}
	for _, s := range p.Stages {
		g.Needs[s.ID] = append([]string(nil), s.Needs...)
		indeg[s.ID] = len(s.Needs)
		for _, n := range s.Needs {
			g.Dependents[n] = append(g.Dependents[n], s.ID)
		}
	}
	done := map[string]bool{}
	for len(g.Order) < len(p.Stages) {
		progressed := false
		for _, s := range p.Stages {
			if done[s.ID] || indeg[s.ID] > 0 {
				continue
			}
			done[s.ID] = true
			g.Order = append(g.Order, s.ID)
			for _, d := range g.Dependents[s.ID] {
				indeg[d]--
			}
			progressed = true
			break // restart from the top so ties keep file order
		}
		if !progressed {
			return nil, fmt.Errorf("stages: needs form a cycle")
		}
	}
	return g, nil
}

// Downstream returns the stages that depend on any of ids, transitively,
// not including ids themselves unless they depend on each other.
func (g *Graph) Downstream(ids ...string) map[string]bool {
	out := map[string]bool{}
	var walk func(id string)
	walk = func(id string) {
		for _, d := range g.Dependents[id] {
			if !out[d] {
				out[d] = true
				walk(d)
			}
		}
	}
	for _, id := range ids {
		walk(id)
	}
	return out
}

// WriteMermaid writes the graph as a Mermaid flowchart; status, when given,
// labels each stage with its state.
func (g *Graph) WriteMermaid(w io.Writer, p *spec.Pipeline, status map[string]Status) error {
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	for _, id := range g.Order {
		s := p.StageByID(id)
		label := fmt.Sprintf("%s<br/><small>%s</small>", id, s.Uses)
		if st, ok := status[id]; ok {
			label += fmt.Sprintf("<br/><i>%s</i>", st)
		}
		fmt.Fprintf(&b, "  %s[\"%s\"]\n", id, label)
	}
	for _, id := range g.Order {
		for _, n := range g.Needs[id] {
			if p.StageByID(id).If != nil {
				fmt.Fprintf(&b, "  %s -.->|if| %s\n", n, id)
			} else {
				fmt.Fprintf(&b, "  %s --> %s\n", n, id)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteDot writes the graph in Graphviz dot.
func (g *Graph) WriteDot(w io.Writer, p *spec.Pipeline, status map[string]Status) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  rankdir=TB;\n  node [shape=box, style=rounded];\n", p.Name)
	for _, id := range g.Order {
		s := p.StageByID(id)
		// Lines joined by dot's own \n escape, each line escaped: %q would
		// double the backslash and show a literal "\n".
		label := dotEscape(id) + `\n` + dotEscape(s.Uses)
		if st, ok := status[id]; ok {
			label += `\n(` + dotEscape(string(st)) + ")"
		}
		fmt.Fprintf(&b, "  %q [label=\"%s\"];\n", id, label)
	}
	for _, id := range g.Order {
		for _, n := range g.Needs[id] {
			style := ""
			if p.StageByID(id).If != nil {
				style = " [style=dashed, label=\"if\"]"
			}
			fmt.Fprintf(&b, "  %q -> %q%s;\n", n, id, style)
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// dotEscape escapes text for a double-quoted dot string.
func dotEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
