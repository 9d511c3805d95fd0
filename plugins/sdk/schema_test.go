package sdk

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

type inner struct {
	Rate float64 `json:"rate" jsonschema:"exclusiveMinimum=0,maximum=1"`
}

type Embedded struct {
	Seed int64 `json:"seed,omitempty"`
}

type schemaWith struct {
	Embedded
	Name     string            `json:"name" jsonschema:"description=run name\\, short,minLength=1,pattern=^[a-z]+$"`
	Mode     string            `json:"mode,omitempty" jsonschema:"enum=fast|slow,default=fast"`
	Devices  int               `json:"devices" jsonschema:"minimum=1,maximum=8,enum=1|2|4|8"`
	Shards   []uint            `json:"shards,omitempty" jsonschema:"minItems=1,maximum=64"`
	Loss     *float32          `json:"loss,omitempty" description:"target loss, if any"`
	Labels   map[string]string `json:"labels,omitzero"`
	Inner    inner             `json:"inner"`
	Pair     [2]string         `json:"pair,omitempty" jsonschema:"deprecated"`
	Timeout  Duration          `json:"timeout,omitempty"`
	Extra    json.RawMessage   `json:"extra,omitempty"`
	At       time.Time         `json:"at,omitempty"`
	Anything any               `json:"anything,omitempty"`
	Blob     []byte            `json:"blob,omitempty"`
	Skipped  string            `json:"-"`
	hidden   int
}

func TestSchemaOfGolden(t *testing.T) {
	got, err := SchemaOf[schemaWith]()
	if err != nil {
		t.Fatal(err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, got, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	golden := filepath.Join("testdata", "schema.golden.json")
	if *update {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Errorf("schema differs from %s (go test -update rewrites it):\n%s", golden, pretty.Bytes())
	}
}

func TestSchemaOfErrors(t *testing.T) {
	type badTag struct {
		N int `json:"n" jsonschema:"minimum=abc"`
	}
	type unknownKey struct {
		N int `json:"n" jsonschema:"minimun=1"`
	}
	type noValue struct {
		N int `json:"n" jsonschema:"minimum"`
	}
	type badCount struct {
		S string `json:"s" jsonschema:"maxLength=-1"`
	}
	type node struct {
		Next *node `json:"next,omitempty"`
	}
	type intKeys struct {
		M map[int]string `json:"m"`
	}
	type withChan struct {
		C chan int `json:"c"`
	}
	tests := []struct {
		name string
		get  func() error
		want string
	}{
		{"bad number", func() error { _, err := SchemaOf[badTag](); return err }, `field N: jsonschema tag: minimum="abc" is not a number`},
		{"unknown keyword", func() error { _, err := SchemaOf[unknownKey](); return err }, `unknown keyword "minimun"`},
		{"no value", func() error { _, err := SchemaOf[noValue](); return err }, `"minimum" needs a value`},
		{"negative count", func() error { _, err := SchemaOf[badCount](); return err }, `maxLength="-1" is not a non-negative integer`},
		{"recursive", func() error { _, err := SchemaOf[node](); return err }, "recursive type"},
		{"int keys", func() error { _, err := SchemaOf[intKeys](); return err }, "only string keys"},
		{"chan", func() error { _, err := SchemaOf[withChan](); return err }, "cannot be part of a with block"},
		{"not a struct", func() error { _, err := SchemaOf[[]int](); return err }, "want a struct"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.get()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestSplitTag(t *testing.T) {
	got := splitTag(`description=a\, b,minimum=1,,x`)
	want := []string{"description=a, b", "minimum=1", "", "x"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("splitTag = %q, want %q", got, want)
	}
}
