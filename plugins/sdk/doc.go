// Package sdk provides what a stage plugin author needs: [Serve] to run a
// stage as an mspipe plugin, and [Stage], a typed stage whose `with` block
// is a Go struct, whose JSON Schema is derived from that struct and whose
// events are sent through a [Context].
//
// A complete plugin:
//
//	type With struct {
//		Text  string `json:"text" jsonschema:"description=what to write"`
//		Times int    `json:"times,omitempty" jsonschema:"minimum=1,default=1"`
//	}
//
//	func main() {
//		sdk.Serve(sdk.Stage[With]{
//			Name:    "acme/echo",
//			Version: "1.0.0",
//			Outputs: []plugins.OutputSpec{{Name: "file", Type: plugins.TypePath}},
//			Execute: func(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
//				path := filepath.Join(sc.WorkDir(), "echo.txt")
//				text := strings.Repeat(w.Text+"\n", w.Times)
//				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
//					return nil, err
//				}
//				sc.Info("wrote", "bytes", len(text))
//				return map[string]any{"file": path}, sc.Artifact("echo", path)
//			},
//		})
//	}
//
// Build it as mspipe-stage-acme-echo, put it in ./plugins (or a directory of
// $MSPIPE_PLUGIN_PATH) and use it with `uses: acme/echo`.
//
// # Schema tags
//
// A field is required unless its json tag has omitempty (or omitzero) or it
// has a default. The `jsonschema` tag adds keywords, comma-separated
// (escape a comma in a value as `\,`, or put a description in its own
// `description:"..."` tag): description, title, pattern, format, minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, minLength,
// maxLength, minItems, maxItems, minProperties, maxProperties, enum (values
// separated by "|"), default, deprecated. On a slice field, value keywords
// (minimum, pattern, enum, ...) apply to its items. A type with a
// `JSONSchema() map[string]any` method supplies its own schema, as
// [Duration] does. Instead of `default` tags, a stage may give one value of
// W as [Stage].Defaults: each of its non-zero fields is that property's
// default (see [SchemaWithDefaults]).
//
// # Who checks a block
//
// mspipe checks every `with` block against the schema the stage describes:
// before a pipeline runs, when a `${{ }}` value is known only by its type,
// and again with the resolved values just before the stage's plugin starts.
// A block that does not fit never reaches the plugin. The SDK does not
// check the schema again (it links no JSON Schema library, whose
// initialisation would slow every plugin start): Validate and Run fill in
// defaults, decode the block strictly into W (unknown fields and values of
// the wrong type are problems) and call Check, which is the place for what
// a schema cannot express. Check must not assume that the schema holds:
// Validate may be called with any block.
package sdk
