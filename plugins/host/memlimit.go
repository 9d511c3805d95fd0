package host

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/plugins"
)

// ErrMemoryLimit is wrapped when a process of a stage ran out of the memory
// its spec's limits.memory allows. Its text is the spec key, so messages
// read "... limit 512.0 MiB per process (limits.memory)".
var ErrMemoryLimit = errors.New("limits.memory")

// outOfMemoryRe matches what a process prints when an allocation is
// refused: the Go runtime's fatal error, C's ENOMEM text, C++'s and
// Python's exceptions, and a thread the C runtime could not start.
var outOfMemoryRe = regexp.MustCompile(`fatal error: (runtime: )?out of memory|[Cc]annot allocate memory|std::bad_alloc|MemoryError|pthread_create failed`)

// rankRe finds the rank a launcher's error names ("rank 3 (device 3) ...").
var rankRe = regexp.MustCompile(`\brank (\d+) \(device \d+\)`)

// goMemoryLimit is the GOMEMLIMIT given to a plugin with a memory limit:
// a little below it, so that Go's collector works harder before an
// allocation is refused.
func goMemoryLimit(limit int64) string {
	return fmt.Sprintf("GOMEMLIMIT=%d", limit/10*9)
}

// memoryError explains err, the failure of a Run under a memory limit, when
// a process of the stage ran out of memory: the plugin itself (its stderr
// holds the runtime's message) or a process it started, such as a rank
// (the error the plugin returned quotes that process's log).
func (c *Client) memoryError(err error) error {
	if c.cfg.MemoryLimit <= 0 || err == nil {
		return err
	}
	limit := bytesize.Format(c.cfg.MemoryLimit)
	if errors.Is(err, plugins.ErrPluginExited) && outOfMemoryRe.MatchString(c.tail.summary()) {
		return fmt.Errorf("%s ran out of memory: limit %s per process (%w): %w", c.label, limit, ErrMemoryLimit, err)
	}
	msg := err.Error()
	if !outOfMemoryRe.MatchString(msg) {
		return err
	}
	who := "a process of the stage"
	if m := rankRe.FindStringSubmatch(msg); m != nil {
		who = "rank " + m[1]
	}
	return fmt.Errorf("%s ran out of memory: limit %s per process (%w): %w", who, limit, ErrMemoryLimit, err)
}
