// Package launch starts the rank processes of the simulated NPU core, one
// per device, the way the seeds' run.sh does — each in its own device{i}/
// directory, with DEVICE_ID, RANK_ID, RANK_SIZE and RANK_TABLE_FILE set,
// the environment saved to env{i}.log and the output to train.log{i} — and
// stops them all when one fails or the caller cancels.
//
// Three launchers (Launcher): Run starts every rank on this host itself
// (local); RunExternal starts one mpirun (Open MPI) or srun (Slurm), which
// starts the ranks on every host of the rank table. A rank started that
// way calls Attach, which takes its rank from the launcher's variables,
// checks it against the rank table and prepares its directory and logs as
// Run would; its events and exit status travel back on the launcher's
// stdout, so the error of a failed job names the rank and its host.
//
// Every local rank runs in its own process group and is killed with its
// parent (Linux parent-death signal), so no rank outlives the launcher; an
// external launcher runs in its own group, gets SIGTERM when mspipe dies,
// and its ranks exit when their parent is gone.
package launch
