package data

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzReadBatch feeds arbitrary bytes to the record parser: it must either
// reject them with the right sentinel and a message naming the file, or
// accept them and round-trip every record byte for byte.
func FuzzReadBatch(f *testing.F) {
	f.Add([]byte{})
	f.Add(records(0))
	f.Add(records(1, 9, 4))
	f.Add(records(10))
	f.Add(append(records(3), 1, 2))
	f.Add(records(2)[:RecordBytes-1])
	f.Add(bytes.Repeat([]byte{255}, 2*RecordBytes))
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := ParseBatch("fuzz.bin", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "read cifar-10 batch fuzz.bin: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			switch {
			case len(b) == 0:
				if !errors.Is(err, ErrEmptyFile) {
					t.Fatalf("empty input: %v", err)
				}
			case len(b)%RecordBytes != 0:
				if !errors.Is(err, ErrRecordSize) {
					t.Fatalf("%d bytes: %v", len(b), err)
				}
			default:
				bad := false
				for off := 0; off < len(b); off += RecordBytes {
					bad = bad || b[off] >= NumClasses
				}
				if !errors.Is(err, ErrLabel) || !bad {
					t.Fatalf("whole records rejected for %v", err)
				}
			}
			return
		}
		if set.Len()*RecordBytes != len(b) || len(b) == 0 {
			t.Fatalf("accepted %d bytes as %d records", len(b), set.Len())
		}
		out := make([]byte, len(b))
		var hist [NumClasses]int
		for i := range set.Len() {
			if set.Label(i) >= NumClasses {
				t.Fatalf("record %d has label %d", i, set.Label(i))
			}
			hist[set.Label(i)]++
			EncodeRecord(out[i*RecordBytes:], set.Label(i), set.Image(i))
		}
		if !bytes.Equal(out, b) {
			t.Fatal("records do not round-trip")
		}
		if hist != set.ClassHistogram() {
			t.Fatal("histogram disagrees with labels")
		}
	})
}
