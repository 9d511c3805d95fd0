// Command mspipe-stage-cifar-augment is an example mspipe stage plugin: it
// reads a CIFAR-10 data set (cifar-10-batches-bin) and writes a copy whose
// training batches also hold a horizontally mirrored, brightness-shifted
// variant of every image, so a model sees twice the data per epoch.
//
// Build it with plain go build into a directory mspipe searches:
//
//	go build -o plugins/mspipe-stage-cifar-augment ./examples/plugins/cifar-augment
//
// and use it as `uses: cifar-augment` (see examples/custom-plugin.yaml).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// With is the stage's input; its JSON Schema is derived from the struct.
type With struct {
	Data       string `json:"data" jsonschema:"minLength=1" description:"cifar-10-batches-bin directory to augment"`
	Brightness int    `json:"brightness,omitempty" jsonschema:"default=16,minimum=0,maximum=128" description:"added to every pixel of the mirrored copy (clamped to 255)"`
}

func main() { sdk.Serve(stage()) }

// stage is the plugin's stage: main serves it, the test runs it in process.
func stage() sdk.Stage[With] {
	return sdk.Stage[With]{
		Name:        "cifar-augment",
		Version:     "1.0.0",
		Description: "Double a CIFAR-10 training set with mirrored, brightened copies",
		Outputs: []plugins.OutputSpec{
			{Name: "dir", Type: plugins.TypePath, Description: "the augmented cifar-10-batches-bin directory"},
			{Name: "train_count", Type: plugins.TypeInt, Description: "training images after augmentation"},
		},
		Execute: augment,
	}
}

func augment(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	out := filepath.Join(sc.WorkDir(), data.DataDirName)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	total := 0
	files := append(data.TrainFileNames(), data.TestFile)
	for i, name := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		set, err := data.ReadFile(filepath.Join(w.Data, name))
		if err != nil {
			return nil, err
		}
		n := set.Len()
		copies := 2
		if name == data.TestFile {
			copies = 1 // never augment held-out data
		}
		buf := make([]byte, 0, n*copies*data.RecordBytes)
		buf = append(buf, set.Bytes()...)
		if copies == 2 {
			img := make([]byte, len(set.Image(0)))
			rec := make([]byte, data.RecordBytes)
			for r := 0; r < n; r++ {
				mirror(img, set.Image(r), w.Brightness)
				data.EncodeRecord(rec, set.Label(r), img)
				buf = append(buf, rec...)
			}
			total += 2 * n
		}
		if err := writeFile(filepath.Join(out, name), buf); err != nil {
			return nil, err
		}
		sc.Progress(int64(i+1), int64(len(files)), "files", name)
	}
	sc.Info(fmt.Sprintf("augmented training set: %d images", total))
	return map[string]any{"dir": out, "train_count": total}, nil
}

// mirror writes src (3 planes of 32x32) flipped left-right into dst, each
// pixel brightened by delta.
func mirror(dst, src []byte, delta int) {
	const side = 32
	for p := 0; p < len(src); p += side * side {
		for y := 0; y < side; y++ {
			row := p + y*side
			for x := 0; x < side; x++ {
				dst[row+x] = byte(min(int(src[row+side-1-x])+delta, 255))
			}
		}
	}
}

// writeFile writes through a temporary file and a rename, so a stage killed
// half-way never leaves a truncated batch file behind.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
