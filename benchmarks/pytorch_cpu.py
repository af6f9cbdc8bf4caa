"""PyTorch's CPU training throughput on the same models and batch as graphrun,
for the README's side-by-side figure (not part of the tests).

  python3 benchmarks/pytorch_cpu.py --model resnet50 --batch-size 32 --steps 6 --warmup 2

Needs `pip install torch torchvision`. Trains on random data (like graphrun's
synthetic), NCHW float32 in channels_last memory format (oneDNN's preferred
layout), SGD with momentum 0.9 and weight decay 1e-4, and prints the median
images/sec over the timed steps, as graphrun reports it.
"""
import argparse
import json
import statistics
import time

import torch
import torchvision


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "vgg16"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--report", default="")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(num_classes=1000)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    images = torch.randn(args.batch_size, 3, 224, 224).to(memory_format=fmt)
    labels = torch.randint(0, 1000, (args.batch_size,))
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
        print(f"step {step + 1}: {elapsed * 1000:.0f} ms, loss {loss.item():.3f}", flush=True)
    median = statistics.median(times)
    result = {
        "framework": f"pytorch {torch.__version__}",
        "model": args.model,
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "channels_last": args.channels_last,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_ms_median": median * 1000,
        "images_per_sec": args.batch_size / median,
    }
    print(f"pytorch {torch.__version__}, {args.model}, batch {args.batch_size}, "
          f"{torch.get_num_threads()} threads: {result['images_per_sec']:.2f} images/sec "
          f"(median step {median * 1000:.0f} ms)")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
