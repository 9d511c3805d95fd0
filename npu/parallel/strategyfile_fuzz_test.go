package parallel

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func FuzzReadStrategy(f *testing.F) {
	files, err := filepath.Glob("testdata/strategy/*/*")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, format := range []StrategyFormat{FormatProto, FormatJSON} {
		data, err := EncodeStrategyFile(sampleStrategyFile(), format)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(append(append([]byte{}, mindSporeBytes...), oldMindSporeLayout...))
	// A merged pipeline file: operators of stages other than current_stage.
	f.Add([]byte(`{"current_stage":0,"parallel_strategy_item":{"a":{"stage":0,"parallel_strategy":[[2]]},"b":{"stage":3,"parallel_strategy":[[1]]}},"parallel_layout_item":{}}`))
	for _, s := range []string{``, `{}`, `{"current_stage":0}`, `[]`, "\x08\x00", `{"current_stage":0,"parallel_layout_item":{"a":{"dev_matrix":[1048576],"tensor_map":[0],"tensor_shape":[1048576],"field":0,"opt_weight_shard_step":0,"opt_weight_shard_size":0}}}`} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := DecodeStrategyFile("fuzz.ckpt", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "strategy file fuzz.ckpt") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := file.Validate(); err != nil {
			t.Fatalf("decoded an invalid file: %v", err)
		}
		// What was accepted survives both encodings: JSON keeps all of
		// it, protobuf all but the tensor shapes.
		for _, format := range []StrategyFormat{FormatProto, FormatJSON} {
			enc, err := EncodeStrategyFile(file, format)
			if err != nil {
				t.Fatalf("%v: encode an accepted file: %v", format, err)
			}
			again, err := DecodeStrategyFile("again", enc)
			if err != nil {
				t.Fatalf("%v: decode a re-encoded file: %v\n%q", format, err, enc)
			}
			want := file
			if format == FormatProto {
				want = withoutShapes(file)
			}
			if !reflect.DeepEqual(again, want) {
				t.Fatalf("%v: round trip changed the file:\n%+v\n%+v", format, again, want)
			}
		}
		// A layout that knows its shape gives boxes inside it, one per
		// device (small layouts only, to keep each input fast).
		for name, l := range file.Layouts {
			if l.Shape == nil || l.Devices() > 1024 || l.Field > 0 {
				continue
			}
			boxes, err := l.Boxes(l.Shape)
			if err != nil {
				t.Fatalf("%s: a valid layout with its own shape: %v", name, err)
			}
			if len(boxes) != l.Devices() {
				t.Fatalf("%s: %d boxes for %d devices", name, len(boxes), l.Devices())
			}
			for _, b := range boxes {
				for k := range l.Shape {
					if b.Offset[k] < 0 || b.Shape[k] < 0 || b.Offset[k]+b.Shape[k] > l.Shape[k] {
						t.Fatalf("%s: box %v outside shape %v", name, b, l.Shape)
					}
				}
			}
		}
	})
}
