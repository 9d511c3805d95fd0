// Package launch provides the local launcher of the simulated NPU core: it
// starts one OS process per device the way the seeds' run.sh does — each in
// its own device{i}/ directory, with DEVICE_ID, RANK_ID, RANK_SIZE and
// RANK_TABLE_FILE set, the environment saved to env{i}.log and the output
// to train.log{i} — and stops them all when one fails or the caller
// cancels.
//
// Every rank runs in its own process group and is killed with its parent
// (Linux parent-death signal), so no rank outlives the launcher.
package launch
