//go:build linux

package tensor

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestAllocAdvisesHugePages checks that a buffer of a few huge pages comes
// back zeroed and that the mapping holding it carries the huge-page advice
// ("hg" in /proc/self/smaps), while a small one is left alone.
func TestAllocAdvisesHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || bytes.Contains(mode, []byte("[never]")) {
		t.Skipf("transparent huge pages unavailable here (%q, %v)", mode, err)
	}
	buf := Alloc(3 * hugePageBytes / 4)
	if len(buf) != 3*hugePageBytes/4 {
		t.Fatalf("Alloc returned %d floats", len(buf))
	}
	for i, v := range buf {
		if v != 0 {
			t.Fatalf("buf[%d] = %g, want 0", i, v)
		}
	}
	// An address inside the first huge page wholly within buf.
	start := uintptr(unsafe.Pointer(&buf[0]))
	inside := (start + hugePageBytes - 1) &^ (hugePageBytes - 1)
	flags, err := vmFlags(inside)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Fatalf("mapping at %#x has VmFlags %q, want the huge-page advice hg", inside, flags)
	}
}

// vmFlags returns the VmFlags line of the mapping of this process that
// holds addr.
func vmFlags(addr uintptr) (string, error) {
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(strings.Fields(line)[0], "-") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	return "", fmt.Errorf("no mapping holds %#x", addr)
}
