//go:build unix

package launch

import "syscall"

// continueGroup resumes a rank's process group after it was signalled, so
// that a stopped process (SIGSTOP, a debugger) handles the signal instead
// of holding it until someone else resumes it, as shells do for `kill` of a
// stopped job.
func continueGroup(p *proc) { signalGroup(p.cmd, syscall.SIGCONT) }
