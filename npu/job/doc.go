// Package job is the rank job of the npu/train stage: what every rank
// process of a training job runs, and what the stage and the planner need
// to know about it beforehand.
//
// The stage resolves its `with` block once into a Config (mode, strategy,
// device memory in bytes, collective endpoint, checkpoint options) and
// writes it as the job's worker.json (WriteConfig). Each rank process,
// started with the seeds' DEVICE_ID, RANK_ID, RANK_SIZE and
// RANK_TABLE_FILE, runs Run on that file: it joins the collective
// (collective.go), builds its trainer (npu/trainer) or its part of a split
// network (npu/shard, engine.go), trains, reports every step on the event
// stream (events.go) and leaves result.json.
//
// Before any rank starts, Plan lays out a split network (the strategy the
// ranks run, auto_parallel's search) from a Layout; the stage, `mspipe
// plan` and bench/parallel share it, and Machine is the cost model's
// machine they all price with. Which mode takes which strategy is
// parallel.Mode.CheckStrategy and shard.CheckModelMode.
//
// The process side (choosing ports, the job secret, which ranks run on
// this host, launching them and relaying their events) stays with the
// stage, stages/npu/train.
package job
