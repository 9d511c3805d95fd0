package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/spf13/cobra"
)

func newCkptConvertCmd() *cobra.Command {
	var crc bool
	cmd := &cobra.Command{
		Use:   "convert IN OUT",
		Short: "Convert a checkpoint between MindSpore .ckpt and safetensors",
		Long: `Convert one checkpoint file between MindSpore's .ckpt format and safetensors.
The direction follows the file names: a name ending in .safetensors is
safetensors, one ending in .ckpt is MindSpore's format. Tensor names, order,
dtypes, shapes and bytes are kept exactly; inspect shows equal SHA256
columns for both files.

dtypes map one to one: Float32 <-> F32, Float16 <-> F16, BFloat16 <-> BF16,
Float64 <-> F64, Int8/16/32/64 <-> I8/16/32/64, UInt8/16/32/64 <-> U8/16/32/64,
Bool <-> BOOL. A safetensors dtype MindSpore has no name for (F8_E4M3, ...)
is refused, naming the tensor. safetensors' __metadata__ has no place in a
.ckpt and is dropped, with a note on stderr.

The whole input is read into memory; OUT is written atomically (a temporary
file renamed into place), so a failed conversion leaves no partial OUT.

Exit status: 0 converted, 1 a damaged or invalid input (the message names
the file and the tensor), 2 usage error or a file that cannot be read or
written.`,
		Example: `  mspipe ckpt convert CKP-Integrated_1-4_32.ckpt model.safetensors
  mspipe ckpt convert model.safetensors init.ckpt
  mspipe ckpt convert old.ckpt new.ckpt --crc     # add MindSpore's crc_num trailer`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, out := args[0], args[1]
			if !isSafetensors(out) && !strings.EqualFold(filepath.Ext(out), ".ckpt") {
				return usageErr(fmt.Errorf("%s: name the output .ckpt or %s, the format follows it", out, ckpt.SafetensorsExt))
			}
			if samePath(in, out) {
				return usageErr(fmt.Errorf("%s: the output would replace the input", out))
			}
			var tensors []ckpt.Tensor
			if isSafetensors(in) {
				f, err := ckpt.ReadSafetensors(in)
				if err != nil {
					return checkpointErr(err)
				}
				tensors = f.Tensors
				if len(f.Metadata) > 0 && !isSafetensors(out) {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %s: __metadata__ (%d keys) dropped: a .ckpt has no place for it\n", in, len(f.Metadata))
				}
			} else {
				f, err := ckpt.ReadFile(in)
				if err != nil {
					return checkpointErr(err)
				}
				tensors = f.Tensors
			}
			var err error
			format := "safetensors"
			if isSafetensors(out) {
				err = ckpt.WriteSafetensors(out, tensors, nil)
			} else {
				format = "ckpt"
				err = ckpt.Write(out, tensors, ckpt.WriteOptions{CRC: crc})
			}
			if err != nil {
				return checkpointErr(err)
			}
			var bytes int64
			for _, t := range tensors {
				bytes += int64(len(t.Data))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d tensors, %d data bytes (%s)\n", out, len(tensors), bytes, format)
			return nil
		},
	}
	cmd.Flags().BoolVar(&crc, "crc", false, "append MindSpore's crc_num trailer to a .ckpt output (save_checkpoint crc_check=True); without it the file is plain protobuf, MindSpore's default")
	return cmd
}

// samePath reports whether a and b name the same file, also through
// different spellings or links.
func samePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ea, err1 := filepath.EvalSymlinks(a)
	eb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ea == eb
}
