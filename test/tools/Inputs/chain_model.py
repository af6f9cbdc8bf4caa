"""Prints a model whose forward applies N chained nn.relu to its input: one
fused group of N + 1 ops in each step.

    chain_model.py N
"""
import sys

n = int(sys.argv[1])
t = "tensor<?x1x4x4xf32>"
lines = ["module {",
         "  nn.parameter @fc.weight : tensor<10x16xf32> = kaiming_uniform",
         "  nn.parameter @fc.bias : tensor<10xf32> = zeros",
         "  func.func @forward(%images: tensor<?x1x4x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {",
         f"    %x0 = nn.relu %images : {t}"]
lines += [f"    %x{i} = nn.relu %x{i - 1} : {t}" for i in range(1, n + 1)]
lines += [f"    %flat = nn.flatten %x{n} start_dim 1 : {t}",
          "    %w = nn.load @fc.weight : tensor<10x16xf32>",
          "    %b = nn.load @fc.bias : tensor<10xf32>",
          "    %fc = nn.linear %flat, %w, %b : tensor<?x16xf32>, tensor<10x16xf32>, tensor<10xf32>",
          "    %loss = nn.softmax_cross_entropy %fc, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>",
          "    return %loss : tensor<f32>", "  }", "}"]
print("\n".join(lines))
