// Package ckpttest checks checkpoint files with the stock protobuf compiler
// against MindSpore's published checkpoint.proto (the copy in
// npu/ckpt/proto), for the tests of every package that writes .ckpt files:
// what protoc decodes, plain protobuf and MindSpore read.
package ckpttest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// ProtoDir is the directory holding checkpoint.proto.
func ProtoDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("ckpttest: cannot locate its own source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "proto")
}

// ProtocPath finds the stock protobuf compiler. Without it the test skips,
// unless MSPIPE_REQUIRE_PROTOC=1 demands it (CI sets it where protoc is
// installed, so a lost install step fails loudly).
func ProtocPath(t testing.TB) string {
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

// Protoc runs protoc with checkpoint.proto's directory on its proto path,
// stdin as its input, and returns its output; a failure fails the test.
func Protoc(t testing.TB, stdin []byte, args ...string) []byte {
	t.Helper()
	dir := ProtoDir(t)
	cmd := exec.Command(ProtocPath(t), append([]string{"--proto_path=" + dir}, args...)...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("protoc %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// Value is one Checkpoint.Value as protoc prints it in text format.
type Value struct {
	Tag     string
	Dims    []int64
	DType   string
	Content []byte
}

// Decode decodes data as one Checkpoint message with protoc, as plain
// protobuf and MindSpore without crc_check read a .ckpt, and returns its
// values in file order. A file protoc cannot parse (one with a crc_num
// trailer, for one) fails the test.
func Decode(t testing.TB, data []byte) []Value {
	t.Helper()
	return ParseText(t, string(Protoc(t, data, "--decode=Checkpoint", "checkpoint.proto")))
}

// DecodeFile is Decode of the file at path.
func DecodeFile(t testing.TB, path string) []Value {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vals := Decode(t, data)
	if len(vals) == 0 {
		t.Fatalf("protoc decoded no values from %s", path)
	}
	return vals
}

// ParseText reads the values out of protoc's text output.
func ParseText(t testing.TB, text string) []Value {
	t.Helper()
	var out []Value
	for _, line := range strings.Split(text, "\n") {
		key, val, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		switch key {
		case "tag":
			out = append(out, Value{Tag: unescapeC(t, val)})
		case "dims":
			d, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				t.Fatalf("protoc dims %q: %v", val, err)
			}
			out[len(out)-1].Dims = append(out[len(out)-1].Dims, d)
		case "tensor_type":
			out[len(out)-1].DType = unescapeC(t, val)
		case "tensor_content":
			out[len(out)-1].Content = []byte(unescapeC(t, val))
		}
	}
	return out
}

// unescapeC undoes protoc's C-style escaping of a quoted string.
func unescapeC(t testing.TB, q string) string {
	t.Helper()
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		t.Fatalf("protoc value %q is not a quoted string", q)
	}
	s := q[1 : len(q)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; {
		case c >= '0' && c <= '7':
			n, err := strconv.ParseUint(s[i:i+3], 8, 8)
			if err != nil {
				t.Fatalf("octal escape in %q: %v", q, err)
			}
			b.WriteByte(byte(n))
			i += 2
		case c == 'n':
			b.WriteByte('\n')
		case c == 'r':
			b.WriteByte('\r')
		case c == 't':
			b.WriteByte('\t')
		default: // \" \' \\
			b.WriteByte(c)
		}
	}
	return b.String()
}
