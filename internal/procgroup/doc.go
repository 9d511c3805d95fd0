// Package procgroup runs a command as the leader of its own process group
// and stops the whole group: the command and everything it started. The
// plugin host, the exec stage and the rank launcher start their processes
// with it, so that no process mspipe starts outlives its stage.
//
// The simplest use:
//
//	cmd := exec.Command("train.sh")
//	if err := procgroup.Prepare(cmd); err != nil {
//		return err
//	}
//	if err := cmd.Start(); err != nil {
//		return err
//	}
//	exited := make(chan struct{})
//	go func() { cmd.Wait(); close(exited) }()
//	...
//	err := procgroup.Stop(cmd.Process.Pid, exited, 5*time.Second)
//
// # Platforms
//
//   - Linux: [Prepare] makes a new process group and sets the parent-death
//     signal (SIGKILL), so the leader also dies when mspipe is killed
//     outright. The kernel sends it when the OS thread that started the
//     leader exits; Go keeps that thread for the life of the process unless
//     a goroutine locked to it ends. [Alive] ignores zombies, which cannot
//     run and may wait forever for a reaper in a container without an init.
//     The parent-death signal reaches only the leader: what the leader
//     started, and anything that left the group with setsid, would outlive
//     it. So stage plugins start with [PrepareSupervisor] (a parent-death
//     signal they can catch, SIGHUP), and plugins/sdk makes them child
//     subreapers (PR_SET_CHILD_SUBREAPER): every orphan below them is
//     reparented to them, not to init, and they kill all of it when they
//     end and at once on that signal. A plugin killed with SIGKILL itself
//     (the OOM killer) cannot do this; then its group leaders still die
//     (their parent-death signal), their descendants not.
//   - Other Unix systems (macOS, the BSDs): a new process group, but no
//     parent-death signal and no subreaper, so a group whose mspipe was
//     killed with SIGKILL keeps running, and a process that left its group
//     survives its stage; [Alive] counts zombies as alive.
//   - Windows and other systems without Unix process groups: [Prepare],
//     [Signal] and [Stop] return an error wrapping [ErrUnsupported], so
//     running stages fails with a clear message; the rest of mspipe (validate,
//     ckpt, ranktable) works.
package procgroup
