// Package collective provides the collective communication of the
// simulated Ascend devices, as HCCL does on hardware: AllReduce,
// ReduceScatter, AllGather, Broadcast, Barrier and AllToAll on []float32
// between rank processes connected by TCP, with shared memory between the
// ranks of one host; and, for operator-parallel training,
// Exchange (AllToAllv: a block of any length for every peer) and
// GroupAllReduce (AllReduce within sub-groups that partition the ranks).
//
// The simplest use builds the configuration of one rank from a rank table
// and reduces gradients in place:
//
//	cfg, err := collective.FromRankTable(table, rankID, collective.DefaultBasePort)
//	if err != nil { ... }
//	cfg.Secret = jobSecret                   // the same bytes on every rank
//	comm, err := collective.Init(ctx, cfg)  // waits for every rank to connect
//	if err != nil { ... }
//	defer comm.Close()
//	err = comm.AllReduce(ctx, grads, collective.Mean)
//
// # Connections
//
// Rank r listens on Addrs[r] (from a rank table: the device_ip of rank r,
// port base+r). Every pair of ranks shares two TCP connections, dialed by
// the higher rank: a data connection for collective frames and a control
// connection for heartbeats, abort notices and goodbyes. Init retries
// refused connections until the connect timeout, since ranks start at
// different times. Each connection starts with a handshake that carries a
// protocol magic and version, the rank size, both ranks, a hash of the
// address list and fresh nonces, authenticated both ways with an HMAC-SHA256
// of the job secret (see handshake.go). A process without the secret is
// refused and cannot join; ranks with different secrets, rank sizes or
// address lists fail Init with ErrAuth or ErrMismatch naming the peer.
// Addresses must be loopback unless Config.AllowRemote is set, so a rank
// table meant for hardware never sends traffic from a development machine.
//
// # Transports
//
// TCP carries every collective and all control traffic. With
// Config.Transport TransportAuto (the default), the ranks of each server
// (Config.Hosts, from the rank table) also share memory, as HCCL uses HCCS
// inside a server and the network between servers: Init checks that every
// rank maps its server's tmpfs segment, and that every server has as many
// ranks. AllReduce of a buffer from Comm.Alloc then goes through shared
// memory: every rank maps every other rank's buffer on its server, and
// the ranks claim the buffer's pieces one by one, each reducing its piece
// straight from all of them in rank order and storing the result into all
// of them, between two barriers (see shm_reduce.go). That moves each
// element once in and once out of every rank, without the kernel's socket
// copies, and gives the bits Mesh gives over TCP. A small buffer (8,192
// elements at most) on one server goes through the staging memory of
// ordinary buffers instead: every rank reduces it whole from the others'
// staged copies, in the same rank order, after one wait instead of two
// barriers, since with more ranks than cores each barrier costs a round
// of scheduling every rank, more than the data. With several servers,
// rank c reduces chunk c of its server's buffers, the ranks at index c of
// every server combine their partial results over TCP in server order,
// and each stores the total into its server's buffers: the result is a
// reduction over servers of reductions over each server's ranks, fixed
// but not Mesh's order. A model keeps its gradients in Alloc memory to use
// it (trainer.Config.AllocGrads). On one server, ReduceScatter of a send
// buffer, AllGather into a recv buffer and Broadcast of a buffer from
// Alloc also read the other ranks' memory directly (same rank order, same
// bits as Mesh).
// Every rank must pass Alloc memory or none (a mix fails at once as out
// of step).
//
// The other collectives between ranks of one server go through staging
// memory (see shm_staging.go), with any buffer: each rank has a tmpfs file
// every rank of its server maps, where it copies what it sends and the
// others copy it out, each waiting only for the ranks it reads. Exchange
// (and SendRecv) stage the blocks for ranks of the same server and send
// the others over TCP; GroupAllReduce stages when the whole group is on
// this server (members reduce in group order: the same bits as over TCP),
// TCP otherwise; on one server, AllReduce of an ordinary buffer with Mesh,
// AllGather of an ordinary buffer and AllToAll also stage. A call whose
// data a rank cannot stage (over 1 GiB, or a full tmpfs) sends that data
// over TCP. Barrier, Broadcast of ordinary buffers and Ring use TCP.
// TransportTCP turns shared memory off; TransportShm makes Init fail
// unless every rank can use it.
//
// # Reduction order
//
// Results never depend on timing: every element is reduced by one rank in a
// fixed order, and every rank receives that rank's result, so all ranks hold
// the same bits and a run repeated gives the same bits.
//
// With Mesh (the default), element i belongs to chunk c (the buffer is cut
// into Size() nearly equal chunks) and rank c computes
//
//	((x0[i] op x1[i]) op x2[i]) ... op x(n-1)[i]
//
// in rank order, where xp is rank p's buffer: exactly what a single process
// reducing the ranks' buffers one after the other in rank order computes. A
// data-parallel run whose ranks AllReduce their gradient sums therefore
// matches, bit for bit, a stand-alone run that adds the same per-rank sums
// in rank order. Mean is that Sum divided by Size() (one float32 division
// per element); Max and Min return NaN if any contribution is NaN.
//
// With Ring, chunk c starts at rank c+1 and travels the ring to its owner
// c, so it is reduced in the order x(c+1), x(c+2), ..., x(n-1), x0, ..., xc:
// fixed, but a rotation of rank order that differs from chunk to chunk, so
// results may differ in the last bits from a sequential sum and from Mesh.
//
// GroupAllReduce reduces in group order, ((x_g0 op x_g1) op x_g2) ...,
// as Mesh does within the group; Mean divides by the group's size.
//
// ReduceScatter uses the same orders; AllGather, Broadcast, AllToAll and
// Exchange only move data. Results also depend on Size() (through the chunk boundaries
// for Ring), never on the segment size.
//
// # Algorithms and wire format
//
// Both algorithms move 2(n-1)/n of the buffer in and out of every rank for
// AllReduce, the minimum. Mesh sends each chunk straight to its owner and
// each result straight to every rank (one step each way); Ring sends only to
// the next rank (n-1 steps each way). Buffers are cut into segments
// (Config.SegmentBytes, default 1 MiB; at most 64 per chunk), and each
// segment is sent on as soon as it is ready, so reduction, forwarding and
// transfer overlap. A frame is a 32-byte header (call number, collective,
// element count, offset, reduce op or root) and the float32 values
// little-endian, written with one writev straight from the caller's buffer
// and read straight into it on little-endian hosts; steady-state calls
// allocate nothing. TCP_NODELAY is set on every connection, and data
// connections get fixed 1 MiB socket buffers (Config.SocketBuffer): with
// kernel autotuning, eight Mesh ranks on one host let receive windows grow
// until the host hit TCP memory pressure and dropped packets. Broadcast
// pipelines the buffer along the ring from the root; Barrier, AllToAll and
// Exchange send directly between every pair (Exchange sends each pair's
// length in a header-only frame first, so a receiver that expects another
// length fails at once, naming the sender; staged blocks carry their
// lengths in the sender's header); GroupAllReduce is Mesh among the
// members of each group.
//
// # Failures
//
// Every wait is bounded by Config.Timeout. A rank reports a dead peer
// (connection closed or reset) or a silent one (no frame and no heartbeat
// within the timeout) as a *PeerError naming the rank and its address:
//
//	collective: allreduce: rank 3 (127.1.0.4:29503) closed the connection
//	collective: allreduce: rank 3 (127.1.0.4:29503) did not answer within 30s
//
// The rank that notices sends an abort notice naming the culprit to every
// other rank over the control connections, so ranks that were waiting on
// someone else fail at once with the same culprit, "(reported by rank 4)".
// Heartbeats (four per timeout) also say which rank their sender is
// waiting for, so a rank that times out waiting on a peer follows the chain
// of waits to its end and blames the rank that waits for nobody, or whose
// heartbeats stopped: every rank of a stuck job names the same root cause.
// Calls on one rank that cannot take part (bad arguments, a canceled
// context) fail the communicator too and tell the peers why.
//
// After any failure the communicator is broken: every later call fails at
// once with ErrBroken wrapping the cause. Close says goodbye to the peers,
// closes every connection and waits for every goroutine of the
// communicator.
//
// # Concurrency
//
// Collectives must be called in the same order with matching arguments on
// every rank; a mismatch is detected from the frame headers and reported as
// ErrOutOfStep with both calls. A call whose buffers are empty returns at
// once without communicating (a rank whose peers pass non-empty buffers is
// then reported by them as not answering). One collective runs at a time per
// communicator (a concurrent call fails with ErrBusy); Close may be called
// from any goroutine. Buffers must not be touched while a call runs.
package collective
