package tests

import "testing"

// reuseSpec is a chain of exec stages that each say which process ran
// them (the parent of their shell) and leave a process running behind
// them; the next stage reads that process's state in /proc (empty when
// it is gone, Z for a zombie nobody collected).
const reuseSpec = `version: 1
name: reuse
stages:
  s1:
    uses: exec
    with: {command: ["sh", "-c", "echo plugin=$PPID >> $MSPIPE_OUTPUT; sleep 300 & echo left=$! >> $MSPIPE_OUTPUT"]}
    outputs: {plugin: int, left: int}
  s2:
    uses: exec
    needs: s1
    with: {command: ["sh", "-c", "echo plugin=$PPID >> $MSPIPE_OUTPUT; echo seen=$(cut -d\" \" -f3 /proc/${{ stages.s1.outputs.left }}/stat) >> $MSPIPE_OUTPUT"]}
    outputs: {plugin: int, seen: string}
  s3:
    uses: exec
    needs: s2
    with: {command: ["sh", "-c", "echo plugin=$PPID >> $MSPIPE_OUTPUT"]}
    outputs: {plugin: int}
`

// Stages of a chain that use the same reusable built-in run in one plugin
// process, one after another; what a stage left running is gone before
// the next starts, and nothing of the run outlives mspipe.
func TestChainReusesThePluginProcess(t *testing.T) {
	w := newWorkspace(t)
	w.write("reuse.yaml", reuseSpec)
	r := w.run("run", "reuse.yaml", "--no-cache")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if left := w.taggedProcesses(); len(left) > 0 {
		t.Errorf("processes %v of the run still live after mspipe exited", left)
	}
	st := w.state(r.stdout)
	p1, p2, p3 := st.Stages["s1"].Outputs["plugin"], st.Stages["s2"].Outputs["plugin"], st.Stages["s3"].Outputs["plugin"]
	if p1 == nil || p1 != p2 || p2 != p3 {
		t.Errorf("the stages ran in plugin processes %v, %v, %v; want one", p1, p2, p3)
	}
	if seen := st.Stages["s2"].Outputs["seen"]; seen != "" {
		t.Errorf("s2 found the process s1 left still there, in state %q", seen)
	}
}
