"""PyTorch's eager training throughput on a CUDA GPU, the side-by-side reference
for graphrun --device cuda (tools/gpu-check runs both in one call).

  python3 benchmarks/pytorch_cuda.py --batch-size 256 --steps 30 --warmup 10 [--tf32 | --amp]

torchvision's ResNet-50 (v1.5, as models/resnet50.mlir), NCHW float32 in
channels_last memory format, cudnn.benchmark on (graphrun also picks each
convolution's algorithm by timing it), SGD with momentum 0.9 and weight decay
1e-4, cross-entropy, random data on the GPU (like graphrun's synthetic). Math
is strict FP32 unless --tf32 (PyTorch's own default lets cuDNN use TF32; this
script turns that off so that both sides compute the same thing). Each step is
timed with CUDA events from the previous step's end, and the host never waits
inside the timed loop; prints and reports the median images/sec over the timed
steps, as graphrun does. --amp is PyTorch's automatic mixed precision as its
documentation recommends it, the reference for graphc --amp=fp16:
torch.autocast(float16) around forward and loss, a GradScaler (dynamic loss
scaling from 2^16) around backward and the step, channels_last.
"""
import argparse
import json
import statistics

import torch
import torchvision


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "vgg16", "vit_b_16"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--amp", action="store_true",
                        help="torch.autocast(float16) + GradScaler (graphc --amp=fp16)")
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--report", default="")
    args = parser.parse_args()
    if args.amp and args.tf32:
        parser.error("--amp and --tf32 are different comparisons; give one")

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    device = torch.device("cuda")
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = getattr(torchvision.models, args.model)(num_classes=1000)
    model = model.to(device).to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * args.batch_size / 256, momentum=0.9,
                          weight_decay=1e-4)
    images = torch.randn(args.batch_size, 3, 224, 224, device=device).to(memory_format=fmt)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
    total = args.warmup + args.steps
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(total + 1)]
    torch.cuda.synchronize()
    ends[0].record()
    for step in range(total):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=args.amp):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        ends[step + 1].record()
    torch.cuda.synchronize()
    times = [ends[s].elapsed_time(ends[s + 1]) for s in range(args.warmup, total)]
    median = statistics.median(times)
    result = {
        "framework": f"pytorch {torch.__version__}",
        "device": torch.cuda.get_device_name(),
        "cudnn": torch.backends.cudnn.version(),
        "model": args.model,
        "batch_size": args.batch_size,
        "channels_last": args.channels_last,
        "math": "fp16 amp" if args.amp else "tf32" if args.tf32 else "fp32",
        "precision": "fp16" if args.amp else "fp32",
        "steps": args.steps,
        "warmup": args.warmup,
        "step_ms_median": median,
        "images_per_sec": args.batch_size * 1000.0 / median,
        "final_loss": loss.item(),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }
    print(f"pytorch {torch.__version__} on {result['device']}, {args.model}, batch "
          f"{args.batch_size}, {result['math']}: {result['images_per_sec']:.1f} images/sec "
          f"(median step {median:.1f} ms)")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
