package parallel

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	straspb "github.com/mspipe/mspipe/npu/parallel/proto"
)

// strategyProtoc finds the stock protobuf compiler. Without it the test
// skips, unless MSPIPE_REQUIRE_PROTOC=1 demands it (.ci/run sets it after
// installing protoc).
func strategyProtoc(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("protoc")
	if err != nil {
		if os.Getenv("MSPIPE_REQUIRE_PROTOC") == "1" {
			t.Fatalf("protoc not found and MSPIPE_REQUIRE_PROTOC=1: %v", err)
		}
		t.Skipf("protoc not found (%v); install protobuf-compiler or set MSPIPE_REQUIRE_PROTOC=1 to make this a failure", err)
	}
	return p
}

func runStrategyProtoc(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(strategyProtoc(t), append([]string{"--proto_path=proto"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("protoc %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

const strategyMessage = "mindspore.straspb.ParallelStrategyMap"

func TestStockProtocDecodesStrategyFile(t *testing.T) {
	strategyProtoc(t)
	f := &StrategyFile{
		CurrentStage: 0,
		Operators:    map[string][][]int{"MatMul-op0": {{1, 1}, {1, 2}}},
		Layouts: map[string]TensorLayout{
			"fc.weight": {DeviceMatrix: []int{2, 1, 1, 2}, TensorMap: []int{1, 0}},
			"embedding": {DeviceMatrix: []int{2, 2}, TensorMap: []int{0, -1}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{0, 3}},
		},
	}
	path := filepath.Join(t.TempDir(), "strategy.ckpt")
	if err := WriteStrategyFile(path, f, FormatProto); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(runStrategyProtoc(t, data, "--decode="+strategyMessage, "proto/node_strategy.proto"))
	want := `current_stage: 0
parallel_strategy_item {
  node_name: "MatMul-op0"
  parallel_strategys {
    stage: 0
    parallel_strategy {
      dim: 1
      dim: 1
    }
    parallel_strategy {
      dim: 1
      dim: 2
    }
  }
}
parallel_layout_item {
  param_name: "embedding"
  parallel_layouts {
    dev_matrix {
      dim: 2
      dim: 2
    }
    tensor_map {
      dim: 0
      dim: -1
    }
    param_split_shape {
      dim: 3
      dim: 5
    }
    indices_offset {
      dim: 0
      dim: 3
    }
    field: 0
    opt_weight_shard_step: 0
    opt_weight_shard_size: 0
  }
}
parallel_layout_item {
  param_name: "fc.weight"
  parallel_layouts {
    dev_matrix {
      dim: 2
      dim: 1
      dim: 1
      dim: 2
    }
    tensor_map {
      dim: 1
      dim: 0
    }
    param_split_shape {
    }
    indices_offset {
    }
    field: 0
    opt_weight_shard_step: 0
    opt_weight_shard_size: 0
  }
}
`
	if got != want {
		t.Fatalf("protoc --decode printed\n%s\nwant\n%s", got, want)
	}
}

func TestReadStockProtocStrategyFile(t *testing.T) {
	// A file encoded by protoc from text, with a layout a MindSpore
	// release before the parallel optimizer would write (no
	// opt_weight_shard fields).
	text := `
current_stage: 0
parallel_strategy_item { node_name: "Conv2D-op3" parallel_strategys { stage: 0 parallel_strategy { dim: 4 dim: 1 dim: 1 dim: 1 } parallel_strategy { dim: 1 dim: 1 dim: 1 dim: 1 } } }
parallel_layout_item { param_name: "conv1.weight" parallel_layouts { dev_matrix { dim: 4 dim: 1 dim: 1 dim: 1 } tensor_map { dim: -1 dim: -1 dim: -1 dim: -1 } param_split_shape { } indices_offset { } field: 0 } }
parallel_layout_item { param_name: "fc.weight" parallel_layouts { dev_matrix { dim: 2 dim: 2 } tensor_map { dim: 0 dim: 1 } field: 0 opt_weight_shard_step: 0 opt_weight_shard_size: -1 } }
`
	data := runStrategyProtoc(t, []byte(text), "--encode="+strategyMessage, "proto/node_strategy.proto")
	got, err := DecodeStrategyFile("protoc.ckpt", data)
	if err != nil {
		t.Fatal(err)
	}
	want := &StrategyFile{
		Operators: map[string][][]int{"Conv2D-op3": {{4, 1, 1, 1}, {1, 1, 1, 1}}},
		Layouts: map[string]TensorLayout{
			"conv1.weight": {DeviceMatrix: []int{4, 1, 1, 1}, TensorMap: []int{-1, -1, -1, -1}},
			"fc.weight":    {DeviceMatrix: []int{2, 2}, TensorMap: []int{0, 1}, OptWeightShardSize: -1},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	boxes, err := got.Layouts["fc.weight"].Boxes([]int{6, 4})
	if err != nil {
		t.Fatal(err)
	}
	// tensor map [0 1]: dimension 0 along the last axis, 1 along the first.
	wantBoxes := []Box{box([]int{0, 0}, []int{3, 2}), box([]int{3, 0}, []int{3, 2}), box([]int{0, 2}, []int{3, 2}), box([]int{3, 2}, []int{3, 2})}
	if !reflect.DeepEqual(boxes, wantBoxes) {
		t.Fatalf("boxes %v, want %v", boxes, wantBoxes)
	}
}

// TestGeneratedCodeMatchesProto fails when node_strategy.proto was edited
// without running go generate: the descriptor protoc builds from the
// .proto must equal the one compiled into straspb.
func TestGeneratedCodeMatchesProto(t *testing.T) {
	out := filepath.Join(t.TempDir(), "set.pb")
	runStrategyProtoc(t, nil, "--descriptor_set_out="+out, "node_strategy.proto")
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.GetFile()) != 1 {
		t.Fatalf("protoc described %d files, want 1", len(set.GetFile()))
	}
	compiled := protodesc.ToFileDescriptorProto(straspb.File_node_strategy_proto)
	if !proto.Equal(set.GetFile()[0], compiled) {
		t.Fatal("node_strategy.pb.go is out of date: run go generate in npu/parallel/proto")
	}
}

// TestSchemaMatchesMindSpore pins the facts of MindSpore's
// node_strategy.proto that make files interchangeable: package, message
// and field names, numbers, labels and types.
func TestSchemaMatchesMindSpore(t *testing.T) {
	want := map[string]string{
		"ParallelStrategy":     "dim=1 repeated uint32",
		"ParallelStrategys":    "stage=1 required uint32; parallel_strategy=2 repeated mindspore.straspb.ParallelStrategy",
		"ParallelStrategyItem": "node_name=1 required string; parallel_strategys=2 required mindspore.straspb.ParallelStrategys",
		"DevMatrix":            "dim=1 repeated uint32",
		"TensorMap":            "dim=1 repeated int32",
		"ParamSplitShape":      "dim=1 repeated int64",
		"IndicesOffset":        "dim=1 repeated int64",
		"ParallelLayouts": "dev_matrix=1 repeated mindspore.straspb.DevMatrix; tensor_map=2 repeated mindspore.straspb.TensorMap; " +
			"param_split_shape=3 repeated mindspore.straspb.ParamSplitShape; indices_offset=4 repeated mindspore.straspb.IndicesOffset; " +
			"field=5 required int32; opt_weight_shard_step=6 required int32; opt_weight_shard_size=7 required int32",
		"ParallelLayoutItem": "param_name=1 required string; parallel_layouts=2 required mindspore.straspb.ParallelLayouts",
		"ParallelStrategyMap": "current_stage=1 required uint32; parallel_strategy_item=2 repeated mindspore.straspb.ParallelStrategyItem; " +
			"parallel_layout_item=3 repeated mindspore.straspb.ParallelLayoutItem",
	}
	file := straspb.File_node_strategy_proto
	if file.Package() != "mindspore.straspb" || file.Syntax() != protoreflect.Proto2 {
		t.Fatalf("package %s syntax %v, want mindspore.straspb proto2", file.Package(), file.Syntax())
	}
	msgs := file.Messages()
	if msgs.Len() != len(want) {
		t.Errorf("%d messages, want %d", msgs.Len(), len(want))
	}
	for i := range msgs.Len() {
		m := msgs.Get(i)
		var fields []string
		for j := range m.Fields().Len() {
			f := m.Fields().Get(j)
			typ := f.Kind().String()
			if f.Message() != nil {
				typ = string(f.Message().FullName())
			}
			fields = append(fields, string(f.Name())+"="+strconv.Itoa(int(f.Number()))+" "+f.Cardinality().String()+" "+typ)
		}
		if got := strings.Join(fields, "; "); got != want[string(m.Name())] {
			t.Errorf("%s: %s\nwant %s", m.Name(), got, want[string(m.Name())])
		}
	}
}
