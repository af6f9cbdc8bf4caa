"""Prints a small model whose nn.relu carries an attribute nested DEPTH deep.

    nested_model.py DEPTH array|dense|dict
"""
import sys

depth, kind = int(sys.argv[1]), sys.argv[2]
if kind == "array":
    attr = "{foo = " + "[" * depth + "1" + "]" * depth + "}"
elif kind == "dense":
    attr = "{foo = dense<" + "[" * depth + "1.0" + "]" * depth + "> : tensor<" + "1x" * depth + "f32>}"
else:
    attr = "{foo = " + "{a = " * depth + "1" + "}" * depth + "}"
print(f"""module {{
  nn.parameter @fc.weight : tensor<10x16xf32> = zeros
  nn.parameter @fc.bias : tensor<10xf32> = zeros
  func.func @forward(%images: tensor<?x1x4x4xf32>, %labels: tensor<?xi32>) -> tensor<f32> {{
    %x = nn.flatten %images start_dim 1 : tensor<?x1x4x4xf32>
    %w = nn.load @fc.weight : tensor<10x16xf32>
    %b = nn.load @fc.bias : tensor<10xf32>
    %fc = nn.linear %x, %w, %b : tensor<?x16xf32>, tensor<10x16xf32>, tensor<10xf32>
    %r = nn.relu %fc {attr} : tensor<?x10xf32>
    %loss = nn.softmax_cross_entropy %r, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }}
}}""")
