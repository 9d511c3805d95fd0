package ckptset

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WatchWrites calls report with the bytes held by the regular files under
// dir (temporary files included, so a file being written counts as it
// grows) every interval until the returned stop is called; stop reports
// once more and returns. It is how a stage shows a run's progress: the
// engine writes its output sequentially, so bytes on disk are work done.
func WatchWrites(ctx context.Context, dir string, every time.Duration, report func(written int64)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				report(bytesUnder(dir))
			}
		}
	}()
	return func() {
		cancel()
		<-done
		report(bytesUnder(dir))
	}
}

func bytesUnder(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil // files come and go (temp files are renamed): count what is there
	})
	return n
}

// ParseSize reads a byte count: a whole number with an optional unit B,
// KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000).
func ParseSize(s string) (int64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.TrimSpace(s[len(num):])
	mult := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || mult == 0 || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a positive size such as 512MiB or 2GiB", s)
	}
	return n * mult, nil
}
