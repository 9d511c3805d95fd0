package spec

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/schemas"
)

// limits.memory is read as a size with a unit; every bad value is reported
// at the value's file:line:col.
func TestStageMemoryLimit(t *testing.T) {
	head := "version: 1\nname: mem\nstages:\n  s:\n    uses: gen\n    limits: "
	good := map[string]int64{
		"{memory: 512MiB}":   512 << 20,
		"{memory: 2GiB}":     2 << 30,
		"{memory: 300MB}":    300e6,
		"{memory: 256 MiB}":  256 << 20,
		"{memory: 1TiB}":     1 << 40,
		"{}":                 0,
		"{memory: \"3GiB\"}": 3 << 30,
	}
	for line, want := range good {
		p, errs := Parse("p.yaml", []byte(head+line+"\n"))
		if len(errs) > 0 {
			t.Errorf("%s: unexpected problems %v", line, errs)
			continue
		}
		if got := p.Stages[0].Limits.Memory; got != want {
			t.Errorf("%s: Limits.Memory = %d, want %d", line, got, want)
		}
	}
	bad := []struct{ line, at, msg string }{
		{"{memory: 536870912}", "536870912", "stages.s.limits.memory: give a unit, for example 536870912MiB"},
		{"{memory: lots}", "lots", `stages.s.limits.memory: "lots" is not a size with a unit`},
		{"{memory: 512mb}", "512mb", `stages.s.limits.memory: "512mb" is not a size with a unit`},
		{"{memory: 0MiB}", "0MiB", `stages.s.limits.memory: "0MiB" is not a size with a unit`},
		{"{memory: 1PiB}", "1PiB", "stages.s.limits.memory: 1PiB is too large: at most 16 TiB"},
		{"{memory: 17TiB}", "17TiB", "stages.s.limits.memory: 17TiB is too large: at most 16 TiB"},
		{"{memory: 99999999999999999999GiB}", "99999999999999999999GiB", "stages.s.limits.memory: 99999999999999999999GiB is too large"},
		{"{memory: 200MiB}", "200MiB", "stages.s.limits.memory: 200.0 MiB is below the smallest limit, 256.0 MiB"},
		{"{memory: [1GiB]}", "[1GiB]", "stages.s.limits.memory: expected a string, got a list"},
		{"{cpu: 2}", "cpu", `stages.s.limits: unknown key "cpu"`},
	}
	for _, b := range bad {
		src := head + b.line + "\n"
		p, errs := Parse("p.yaml", []byte(src))
		if len(errs) != 1 {
			t.Errorf("%s: got %d problems %v, want 1", b.line, len(errs), errs)
			continue
		}
		if want := posOf(t, src, b.at); errs[0].Where() != want || !strings.Contains(errs[0].Message, b.msg) {
			t.Errorf("%s: problem %s\nwant at %s containing %q", b.line, errs[0], want, b.msg)
		}
		if p.Stages[0].Limits.Memory != 0 {
			t.Errorf("%s: a refused value set Limits.Memory = %d", b.line, p.Stages[0].Limits.Memory)
		}
	}
}

// The published schema and the decoder accept the same sizes.
func TestMemoryLimitSchemaPattern(t *testing.T) {
	var doc struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Properties map[string]struct {
					Pattern string `json:"pattern"`
				} `json:"properties"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemas.Base, &doc); err != nil {
		t.Fatal(err)
	}
	pattern := doc.Defs["stage"].Properties["limits"].Properties["memory"].Pattern
	if pattern == "" {
		t.Fatal("the schema has no pattern for stages.*.limits.memory")
	}
	schemaRe := regexp.MustCompile(pattern)
	for _, v := range []string{"512MiB", "2GiB", "64 MiB", "100MB", "1B", "512mb", "512", "lots", "1.5GiB", " 1GiB"} {
		if schemaRe.MatchString(v) != memoryRe.MatchString(v) {
			t.Errorf("%q: schema match %v, decoder match %v", v, schemaRe.MatchString(v), memoryRe.MatchString(v))
		}
	}
}
