package sdk_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// echoWith is the `with` block of the example stage.
type echoWith struct {
	Text  string `json:"text" jsonschema:"description=what to write,minLength=1"`
	Times int    `json:"times,omitempty" jsonschema:"minimum=1,maximum=10,default=1"`
}

// echoStage writes text to a file in the work dir, Times times.
var echoStage = sdk.Stage[echoWith]{
	Name:        "acme/echo",
	Version:     "1.0.0",
	Description: "Write text to a file.",
	Outputs:     []plugins.OutputSpec{{Name: "file", Type: plugins.TypePath}, {Name: "lines", Type: plugins.TypeInt}},
	Execute: func(ctx context.Context, sc sdk.Context, w echoWith) (map[string]any, error) {
		path := filepath.Join(sc.WorkDir(), "echo.txt")
		if err := os.WriteFile(path, []byte(strings.Repeat(w.Text+"\n", w.Times)), 0o644); err != nil {
			return nil, err
		}
		sc.Info("wrote", "lines", w.Times)
		return map[string]any{"file": path, "lines": w.Times}, nil
	},
}

// A plugin's main is one call; the binary, named mspipe-stage-acme-echo and
// put in ./plugins, is then used with `uses: acme/echo`.
func ExampleServe() {
	sdk.Serve(echoStage)
}

func ExampleSchemaOf() {
	schema, err := sdk.SchemaOf[echoWith]()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(schema))
	// Output:
	// {"$schema":"https://json-schema.org/draft/2020-12/schema","additionalProperties":false,"properties":{"text":{"description":"what to write","minLength":1,"type":"string"},"times":{"default":1,"maximum":10,"minimum":1,"type":"integer"}},"required":["text"],"type":"object"}
}

// Validate decodes the block into the struct: a value of the wrong type or
// an unknown field is a problem. Bounds such as times' maximum are in the
// schema, which mspipe checks before the stage runs.
func ExampleStage_Validate() {
	for _, with := range []map[string]any{
		{"text": "hi", "times": "twice"},
		{"text": "hi", "txt": "hi"},
		{"text": "hi", "times": 20},
	} {
		problems, _ := echoStage.Validate(context.Background(), plugins.ValidateRequest{With: with})
		fmt.Println(problems)
	}
	// Output:
	// [/times: want int, got string]
	// [unknown field "txt"]
	// []
}

// shardWith asks for a model split into parts, one per group of devices.
type shardWith struct {
	Data  string `json:"data"`
	Parts int    `json:"parts,omitempty" jsonschema:"minimum=1,default=1"`
}

// CheckCluster sees the cluster the stage will run on. Before the run,
// keys whose values come from other stages are listed as unknown; here
// data is one, and parts is still checked against the 8 devices.
func ExampleStage_Validate_cluster() {
	stage := sdk.Stage[shardWith]{
		Name: "acme/shard",
		CheckCluster: func(w shardWith, cluster plugins.Cluster, unknown []string) []plugins.Problem {
			if cluster.Devices == 0 || slices.Contains(unknown, "parts") {
				return nil // known only when the stage runs, which calls this again
			}
			if cluster.Devices%w.Parts != 0 {
				return []plugins.Problem{{Path: "/parts", Message: fmt.Sprintf("%d parts do not divide %d devices", w.Parts, cluster.Devices)}}
			}
			return nil
		},
		Execute: func(context.Context, sdk.Context, shardWith) (map[string]any, error) { return nil, nil },
	}
	problems, _ := stage.Validate(context.Background(), plugins.ValidateRequest{
		With:    map[string]any{"parts": 3},
		Cluster: plugins.Cluster{Devices: 8},
		Unknown: []string{"data"},
	})
	fmt.Println(problems)
	// Output:
	// [/parts: 3 parts do not divide 8 devices]
}

func ExampleStage_Run() {
	work, _ := os.MkdirTemp("", "echo-example-")
	defer os.RemoveAll(work)
	req := plugins.RunRequest{WorkDir: work, With: map[string]any{"text": "hello", "times": 2}}
	outputs, err := echoStage.Run(context.Background(), req, func(e plugins.Event) {
		if e.Log != nil {
			fmt.Println("log:", e.Log.Message, e.Log.Fields)
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	data, _ := os.ReadFile(outputs["file"].(string))
	fmt.Printf("lines: %v\n%s", outputs["lines"], data)
	// Output:
	// log: wrote map[lines:2]
	// lines: 2
	// hello
	// hello
}
