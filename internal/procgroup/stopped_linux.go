package procgroup

// Stopped reports whether process pid is stopped: by a stop signal
// (SIGSTOP, SIGTSTP, ...) or by a debugger. A stopped process runs no code,
// so it can neither notice a failure nor answer a signal other than
// SIGKILL and SIGCONT.
func Stopped(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && (state == 'T' || state == 't')
}

// Exited reports whether process pid has exited but has not been reaped
// yet (a zombie): its exit status is on its way to whoever waits for it.
func Exited(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && (state == 'Z' || state == 'X')
}
