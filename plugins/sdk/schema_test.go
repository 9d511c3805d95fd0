package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/internal/testutil/golden"

	"github.com/mspipe/mspipe/plugins"
)

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
	golden.Check(t, filepath.Join("testdata", "schema.golden.json"), pretty.Bytes())
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

// A Defaults value is the one place a stage writes its defaults: its
// non-zero fields become the schema's defaults (and make the field
// optional), and decoding fills them in.
func TestSchemaWithDefaults(t *testing.T) {
	type with struct {
		Data    string   `json:"data"`
		Epochs  int      `json:"epochs" jsonschema:"minimum=1"`
		LR      float64  `json:"lr,omitempty"`
		Mode    string   `json:"mode,omitempty"`
		Timeout Duration `json:"timeout,omitempty"`
		Eval    *bool    `json:"eval,omitempty"`
		Zero    int      `json:"zero,omitempty"`
	}
	yes := true
	defaults := with{Epochs: 2, LR: 0.5, Mode: "fast", Timeout: Duration(90 * time.Second), Eval: &yes}
	raw, err := SchemaWithDefaults(defaults)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"epochs": 2.0, "lr": 0.5, "mode": "fast", "timeout": "1m30s", "eval": true}
	for name, p := range schema.Properties {
		if d, ok := p["default"]; ok != (want[name] != nil) || d != want[name] {
			t.Errorf("%s: default %v (present %v), want %v", name, d, ok, want[name])
		}
	}
	if strings.Join(schema.Required, ",") != "data" {
		t.Errorf("required %v, want [data]: a default makes epochs optional", schema.Required)
	}

	var got with
	s := Stage[with]{Name: "x/defaults", Defaults: defaults, Execute: func(_ context.Context, _ Context, w with) (map[string]any, error) {
		got = w
		return nil, nil
	}}
	if _, err := s.Run(context.Background(), plugins.RunRequest{With: map[string]any{"data": "d", "lr": 0.25}}, nil); err != nil {
		t.Fatal(err)
	}
	if got.Epochs != 2 || got.LR != 0.25 || got.Mode != "fast" || got.Timeout != defaults.Timeout || got.Eval == nil || !*got.Eval || got.Zero != 0 {
		t.Errorf("decoded %+v, want the defaults with lr 0.25", got)
	}

	type twice struct {
		N int `json:"n,omitempty" jsonschema:"default=3"`
	}
	if _, err := SchemaWithDefaults(twice{N: 3}); err == nil || !strings.Contains(err.Error(), "field N: a default in its jsonschema tag and in the defaults value") {
		t.Errorf("default written twice: %v", err)
	}
}
