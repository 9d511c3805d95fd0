package ckpt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	ckptpb "github.com/mspipe/mspipe/npu/ckpt/proto"
)

// bigTensors is a checkpoint of several flushes of encodeInto: tensors of
// 300 KiB, so the buffer is written part-way through some of them.
func bigTensors() []Tensor {
	var out []Tensor
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		data := make([]byte, 300<<10)
		for j := range data {
			data[j] = byte(i*7 + j)
		}
		out = append(out, Tensor{Name: name, DType: DTypeFloat32, Dims: []int64{int64(len(data) / 4)}, Data: data})
	}
	return out
}

// TestBufferedEncodeIsOneMessagePerValue checks that gathering the encoded
// messages before writing changes no byte: the file is each Value's
// Checkpoint message, marshalled on its own, one after the other.
func TestBufferedEncodeIsOneMessagePerValue(t *testing.T) {
	tensors := bigTensors()
	var want []byte
	for _, ten := range tensors {
		msg := &ckptpb.Checkpoint{Value: []*ckptpb.Checkpoint_Value{{
			Tag: proto.String(ten.Name),
			Value: &ckptpb.Checkpoint_Value_Tensor{Tensor: &ckptpb.TensorProto{
				Dims: ten.Dims, TensorType: proto.String(ten.DType), TensorContent: ten.Data,
			}},
		}}}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
	}
	var got bytes.Buffer
	if err := Encode(&got, tensors, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("encoded %d bytes, differing from the %d bytes of the messages marshalled one by one", got.Len(), len(want))
	}
}

// TestProgressSeesAWritePartWay checks that with a Progress function the
// encoder writes each message on its own, so a fault at half the bytes
// (npu/train's kill_during_save) fires with part of the file still unwritten,
// even in a file smaller than the write buffer.
func TestProgressSeesAWritePartWay(t *testing.T) {
	tensors := bigTensors()
	for i := range tensors {
		tensors[i].Data = tensors[i].Data[:4096]
		tensors[i].Dims = []int64{1024}
	}
	var total int64
	for _, ten := range tensors {
		total += int64(len(ten.Data))
	}
	var reports []int64
	path := filepath.Join(t.TempDir(), "CKP-1_1.ckpt")
	err := Write(path, tensors, WriteOptions{Digest: true, Progress: func(_ string, written int64) {
		reports = append(reports, written)
	}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) < 2 || reports[len(reports)-1] != info.Size() {
		t.Fatalf("progress %v: want several reports ending at the file's %d bytes", reports, info.Size())
	}
	partWay := false
	for _, w := range reports {
		partWay = partWay || (2*w >= total && w < info.Size())
	}
	if !partWay {
		t.Errorf("progress %v: no report at half the data (%d bytes) before the end", reports, total/2)
	}
}

// TestFailedEncodeLeavesNoBytesForTheNext checks that the scratch buffer a
// series reuses starts empty after an encode that failed part-way.
func TestFailedEncodeLeavesNoBytesForTheNext(t *testing.T) {
	dir := t.TempDir()
	var scratch []byte
	bad := append(bigTensors()[:2], Tensor{Name: "bad", DType: DTypeFloat32, Dims: []int64{3}, Data: make([]byte, 5)})
	if err := write(filepath.Join(dir, "bad.ckpt"), bad, WriteOptions{}, &scratch); !errors.Is(err, ErrShape) {
		t.Fatalf("err %v, want ErrShape", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.ckpt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed write left a file: %v", err)
	}
	small := []Tensor{{Name: "w", DType: DTypeFloat32, Dims: []int64{1}, Data: []byte{1, 2, 3, 4}}}
	path := filepath.Join(dir, "good.ckpt")
	if err := write(path, small, WriteOptions{}, &scratch); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := Encode(&want, small, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("the write after a failed one has %d bytes, want %d", len(got), want.Len())
	}
}
