// Package ckpt provides MindSpore checkpoint (.ckpt) files as plain Go data:
// reading and writing them bit-compatibly with MindSpore, content hashes for
// comparing tensors, and the ModelCheckpoint rules for naming, rotating and
// finding checkpoint files during training.
//
// # Overview
//
// A checkpoint is a list of named tensors. Write stores them; Read loads them
// back in file order:
//
//	w, _ := ckpt.NewFloat32("fc.weight", []int64{2, 3}, values)
//	err := ckpt.Write("CKP-1_32.ckpt", []ckpt.Tensor{w}, ckpt.WriteOptions{})
//	tensors, err := ckpt.Read("CKP-1_32.ckpt")
//
// # File format
//
// The file is MindSpore's protobuf Checkpoint message (see ckptpb and
// proto/checkpoint.proto): repeated Values, each a tag (the parameter name)
// and a TensorProto with dims, a dtype name such as "Float32" and the raw
// little-endian bytes. MindSpore writes one Checkpoint message per Value and
// concatenates them, which protobuf reads as one message.
//
// A tensor whose data is larger than the slice limit (512 MiB in MindSpore,
// WriteOptions.SliceBytes here) is split into ceil(bytes/limit) consecutive
// Values with the same tag, as numpy.array_split splits the flattened array:
// the first bytes%k pieces get one element more. Every piece carries the dims
// of the whole tensor; a reader concatenates the pieces and checks the total
// against the dims. A scalar is stored with dims [0] and one element.
//
// Newer MindSpore versions can append a CRC trailer: the 7 ASCII bytes
// "crc_num" then the CRC-32 (IEEE) of all preceding bytes as a 10-byte
// big-endian integer (save_checkpoint(crc_check=True)). Read verifies it
// whenever it is present; Write adds it only when WriteOptions.CRC is set,
// since MindSpore's default is no trailer and the versions without
// crc_check parse the whole file as protobuf and fail on one.
//
// # Integrity without a trailer
//
// WriteOptions.Digest puts a sidecar digest file beside the checkpoint
// ({name}.sha256, sha256sum's format) and leaves the checkpoint itself
// untouched. ReadFile checks the sidecar whenever it is there; ReadVerified,
// which resuming uses, also demands that a trailer or a sidecar is there, so
// a flipped byte in a checkpoint of a training series is caught on load.
// ModelCheckpoint removes a sidecar together with its checkpoint.
//
// # Invariants
//
// Every Tensor returned by Read or Decode has a known dtype, non-negative dims
// whose element count times the dtype size equals len(Data) without overflow,
// and a name that is non-empty, valid UTF-8 and unique in the file. Bad input
// gives an *Error naming the file, the tensor and the byte offset; it never
// panics.
package ckpt
