// Package exec provides the built-in `exec` stage: it runs one command (an
// argv list, or a string for /bin/sh -c) in the stage's work directory,
// streams the command's stdout and stderr lines as log events and returns
// its exit code, the end of its stdout, and the name=value lines the
// command wrote to the file named by $MSPIPE_OUTPUT.
//
//	build:
//	  uses: exec
//	  with:
//	    command: ["make", "-C", "..", "data"]
//	    timeout: 10m
//	report:
//	  uses: exec
//	  needs: [build]
//	  with:
//	    command: 'echo "files=$(ls | wc -l)" >> "$MSPIPE_OUTPUT"'
//
// The command runs in its own process group; when the stage is cancelled
// or times out, the group gets SIGTERM, then SIGKILL after a grace period.
// Processes it left behind in its group are killed when it exits; any that
// left the group (setsid) are killed, on Linux, when the plugin process
// ends, or at once when mspipe dies (plugins/sdk reaps them).
package exec
