// Command gen writes the synthetic checkpoint set bench/reshard measures: a
// set of per-rank MindSpore .ckpt files in device{i}/ckpt_{i}/ with its
// strategy file (strategy.json, MindSpore's JSON form), shaped like a
// model-parallel job's: big weights split along rows, one along columns,
// each with its optimizer moment, plus replicated BatchNorm statistics and
// scalars.
//
//	go run ./bench/reshard/gen -out /tmp/set -ranks 8 -size 2GiB
//
// -size is the total tensor data of the set (weights and moments); each of
// the -params weights gets size/(2*params). Values come from a fixed
// xorshift stream, so two runs write the same bytes. One rank's tensors
// are in memory at a time.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

// cols is the width of every weight; rows follow from the size.
const cols = 4096

func main() {
	out := flag.String("out", "", "directory for the set (created)")
	ranks := flag.Int("ranks", 8, "ranks of the set")
	size := flag.String("size", "2GiB", "tensor data of the whole set (weights and moments)")
	params := flag.Int("params", 4, "big weights; the last is split along columns")
	flag.Parse()
	if err := run(*out, *ranks, *size, *params); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out string, ranks int, sizeText string, params int) error {
	if out == "" || ranks < 1 || params < 1 {
		return fmt.Errorf("give -out, and -ranks and -params of at least 1")
	}
	size, err := bytesize.Parse(sizeText)
	if err != nil {
		return fmt.Errorf("-size: %w", err)
	}
	// Rows of a weight: a multiple of ranks (and of 4 and 8, the targets).
	unit := int64(ranks * 8)
	rows := size / int64(2*params) / 4 / cols / unit * unit
	if rows == 0 {
		rows = unit
	}
	sf := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{}}
	names := make([]string, params)
	for p := range names {
		names[p] = fmt.Sprintf("layer%d.weight", p)
		tmap := []int{0, -1}
		if p == params-1 && params > 1 {
			tmap = []int{-1, 0} // columns
		}
		sf.Layouts[names[p]] = parallel.TensorLayout{DeviceMatrix: []int{ranks}, TensorMap: tmap}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := parallel.WriteStrategyFile(filepath.Join(out, "strategy.json"), sf, parallel.FormatJSON); err != nil {
		return err
	}
	var total int64
	for r := range ranks {
		var tensors []ckpt.Tensor
		for p, name := range names {
			shape := []int64{rows / int64(ranks), cols}
			if sf.Layouts[name].TensorMap[1] == 0 {
				shape = []int64{rows, cols / int64(ranks)}
			}
			tensors = append(tensors,
				random(name, shape, uint64(r*1000+p)+1),
				random("moments."+name, shape, uint64(r*1000+p)+500))
		}
		bn := random("bn.moving_mean", []int64{cols}, uint64(r)+7) // per device, as data parallel keeps it
		lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
		step := ckpt.Tensor{Name: "global_step", Dims: []int64{1}, DType: ckpt.DTypeInt32, Data: []byte{100, 0, 0, 0}}
		tensors = append(tensors, bn, lr, step)
		path, err := ckptset.WriteRank(out, r, "CKP-1_100.ckpt", tensors)
		if err != nil {
			return err
		}
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		total += st.Size()
	}
	fmt.Printf("%s: %d ranks, %d weights of %dx%d and their moments, %d bytes of files\n", out, ranks, params, rows, cols, total)
	return nil
}

// random returns a Float32 tensor of values in [-1, 1) from a xorshift
// stream seeded with seed.
func random(name string, shape []int64, seed uint64) ckpt.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := int64(0); i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v := float32(int32(x>>32)) / (1 << 31)
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return ckpt.Tensor{Name: name, Dims: shape, DType: ckpt.DTypeFloat32, Data: data}
}
