#!/usr/bin/env python3
"""Writes the files test/tools/vit-import.test reads: a tiny ViT exported by
PyTorch and what PyTorch computes from it (run with a Python that has torch,
torchvision and onnx; CI reads the committed files and needs none of them).

  make_vit_tiny.py DIR

DIR/vit_tiny.onnx        torchvision's VisionTransformer (16 px, 4x4 patches,
                         2 layers, 2 heads, width 16, MLP 32, 10 classes),
                         training form, opset 17, a symbolic batch axis
DIR/vit_tiny_x.npy       images [2, 3, 16, 16]; vit_tiny_y.npy labels [2] (int32)
DIR/vit_tiny_ref.json    float64 PyTorch from the file's weights: the logits,
                         and the losses of 3 SGD steps (lr 0.1, momentum 0.9)
"""
import json
import os
import sys
import warnings

import numpy as np
import torch
from torchvision.models.vision_transformer import VisionTransformer

warnings.filterwarnings("ignore")


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=2,
                              hidden_dim=16, mlp_dim=32, num_classes=10).train()
    with torch.no_grad():  # torchvision starts the head and class token at zero
        model.heads.head.weight.normal_(0, 0.2)
        model.class_token.normal_(0, 0.2)
    x = torch.randn(2, 3, 16, 16)
    y = torch.tensor([3, 7])
    path = os.path.join(out, "vit_tiny.onnx")
    torch.onnx.export(model, (x,), path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      dynamo=False, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    np.save(os.path.join(out, "vit_tiny_x.npy"), x.numpy())
    np.save(os.path.join(out, "vit_tiny_y.npy"), y.numpy().astype(np.int32))
    model = model.double()
    logits = model(x.double()).detach().numpy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.double()), y)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
    with open(os.path.join(out, "vit_tiny_ref.json"), "w") as f:
        json.dump({"logits": logits.tolist(), "losses": losses}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
