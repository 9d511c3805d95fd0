#!/usr/bin/python3
"""PyTorch side of the side-by-side training benchmark (bench/train/run.sh).

The model is mspipe's ResNet-20 (npu/nn/resnet.go, block.go) written in
PyTorch: conv1 3x3 3->16 without bias, bn1, ReLU; three stages of three basic
blocks (conv 3x3, BN, ReLU, conv 3x3, BN, plus the shortcut, then ReLU) at
16, 32 and 64 channels, stride 2 at the start of stages 2 and 3, where the
shortcut is a 1x1 convolution (stride 2, no bias) and a BN; global average
pool, flatten, Dense 64->10 with bias. BatchNorm eps 1e-5; MindSpore's
momentum 0.9 (moving = 0.9*moving + 0.1*batch) is PyTorch's momentum 0.1.
Loss: softmax cross entropy, mean over the batch. Optimizer: SGD, momentum
0.9, learning rate 0.01, no weight decay, no dampening (MindSpore's
ApplyMomentum: accum = 0.9*accum + g; w -= lr*accum).

Two differences that change no shape and no FLOP count: for the two 3x3
stride-2 convolutions mspipe's pad_mode "same" pads one row/column at the
bottom/right only, PyTorch's padding=1 pads both sides (the window grid is
offset by one pixel); and PyTorch's running variance uses the unbiased batch
variance, mspipe's (as MindSpore's CPU kernel) the biased one.

Prints one JSON line with images/s. Run with Debian's /usr/bin/python3 and
its python3-torch package.
"""

import argparse
import ctypes
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (torch.set_num_threads)")
    p.add_argument("--batch", type=int, default=32, help="images per step")
    p.add_argument("--size", type=int, default=32, help="image height and width")
    p.add_argument("--classes", type=int, default=10, help="classes of the last Dense layer")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before the timed ones")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--seed", type=int, default=1, help="seed of the parameters and the batch")
    p.add_argument("--allocator", default="", help="label of the malloc in use, echoed in the JSON")
    p.add_argument("--expect-trainable", type=int, default=0,
                   help="exit 2 unless the trainable parameter count equals this (mspipe's)")
    args = p.parse_args(argv)
    for name, low in (("threads", 1), ("batch", 1), ("size", 1), ("classes", 1), ("warmup", 0), ("steps", 1)):
        if getattr(args, name) < low:
            p.error(f"--{name} {getattr(args, name)}, want at least {low}")
    return args


def set_thread_env(threads):
    """Thread counts read by the OpenMP, MKL and OpenBLAS runtimes when torch loads."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)


def build_model(nn, classes):
    eps, momentum = 1e-5, 0.1  # MindSpore's momentum 0.9 in PyTorch's convention

    def bn(channels):
        return nn.BatchNorm2d(channels, eps=eps, momentum=momentum)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1d = bn(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
            self.bn2d = bn(cout)
            self.down_sample_layer = None
            if stride != 1 or cin != cout:
                self.down_sample_layer = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), bn(cout))

        def forward(self, x):
            h = self.relu(self.bn1d(self.conv1(x)))
            h = self.bn2d(self.conv2(h))
            s = x if self.down_sample_layer is None else self.down_sample_layer(x)
            return self.relu(h + s)

    class ResNet20(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, stride=1, padding=1, bias=False)
            self.bn1 = bn(16)
            self.relu = nn.ReLU(inplace=True)
            blocks, cin = [], 16
            for cout, stride in ((16, 1), (32, 2), (64, 2)):
                for i in range(3):
                    blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                    cin = cout
            self.layers = nn.Sequential(*blocks)
            self.end_point = nn.Linear(cin, classes, bias=True)

        def forward(self, x):
            x = self.layers(self.relu(self.bn1(self.conv1(x))))
            return self.end_point(x.mean(dim=(2, 3)))

    model = ResNet20()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):  # He normal, fan_out, ReLU gain, as mspipe
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.Linear):  # U(-1/sqrt(in), 1/sqrt(in)), zero bias, as mspipe
            bound = 1 / m.in_features ** 0.5
            nn.init.uniform_(m.weight, -bound, bound)
            nn.init.zeros_(m.bias)
    return model


def param_counts(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # mspipe's total counts the BatchNorm moving mean and variance too; PyTorch's
    # num_batches_tracked counter has no mspipe counterpart.
    stats = sum(b.numel() for name, b in model.named_buffers() if not name.endswith("num_batches_tracked"))
    return trainable, trainable + stats


def blas_info(torch):
    """What does the math: the build's BLAS setting, the OpenBLAS core it picked, oneDNN."""
    config = torch.__config__.show()
    found = re.search(r"BLAS_INFO=([^,\s]+)", config)
    capability = re.search(r"CPU capability usage: (\S+)", config)
    info = {"torch_blas_info": found.group(1) if found else "", "openblas": "",
            "mkldnn": bool(torch.backends.mkldnn.is_available()), "mkl": bool(torch.backends.mkl.is_available()),
            "aten_cpu_capability": capability.group(1) if capability else ""}
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        info["openblas"] = "%s, core %s" % (lib.openblas_get_config().decode().strip(),
                                             lib.openblas_get_corename().decode())
    except (OSError, AttributeError):
        pass
    return info


def onednn_kernels(torch, step):
    """The oneDNN ISA and the convolution implementations one step ran.

    oneDNN's verbose mode prints from C++ to file descriptor 1, so it is sent
    to a temporary file for the step and parsed; the JSON line stays clean.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+") as log:
        os.dup2(log.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                step()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        lines = log.read().splitlines()
    isa, convs = "", set()
    for line in lines:
        fields = line.split(",")
        if len(fields) > 3 and fields[2] == "cpu" and fields[3].startswith("isa:"):
            isa = fields[3][len("isa:"):]
        elif len(fields) > 5 and fields[1] == "exec" and fields[3] == "convolution":
            convs.add(f"{fields[4]} {fields[5]}")
    return {"onednn_isa": isa, "onednn_convolutions": sorted(convs)}


def main(argv):
    args = parse_args(argv)
    set_thread_env(args.threads)
    import torch
    from torch import nn

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = build_model(nn, args.classes)
    model.train()
    trainable, total = param_counts(model)
    if args.expect_trainable and trainable != args.expect_trainable:
        print(f"torch_resnet20.py: PyTorch model has {trainable} trainable parameters, mspipe's has "
              f"{args.expect_trainable}: the architectures differ", file=sys.stderr)
        return 2
    loss_fn = nn.CrossEntropyLoss(reduction="mean")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, dampening=0, weight_decay=0, nesterov=False)
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, args.classes, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    res = {"side": "pytorch", "model": "resnet20", "threads": args.threads,
           "torch_threads": torch.get_num_threads(), "batch": args.batch, "image_size": args.size,
           "warmup": args.warmup, "steps": args.steps, "allocator": args.allocator or "glibc",
           "ld_preload": os.environ.get("LD_PRELOAD", ""), "params_trainable": trainable, "params_total": total,
           "torch_version": torch.__version__}
    first = None
    for _ in range(args.warmup):
        loss = step()
        first = loss if first is None else first
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
        first = loss if first is None else first
    seconds = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    res.update(seconds=seconds, images_per_sec=args.batch * args.steps / seconds,
               median_step_images_per_sec=args.batch / statistics.median(times),
               best_step_images_per_sec=args.batch / min(times), page_faults_per_step=faults / args.steps,
               first_loss=first, last_loss=loss)
    res.update(blas_info(torch))
    res.update(onednn_kernels(torch, step))  # after the timing: verbose mode costs time
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
