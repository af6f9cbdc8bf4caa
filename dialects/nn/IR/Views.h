//===- Views.h - reshapes, transposes and slices as strided reads -*- C++ -*-===//
//
// A chain of nn.reshape / nn.flatten / nn.transpose / nn.slice rearranges a
// row-major tensor without computing anything: every element of the result
// is one element of the chain's input, at an offset that is an affine
// function of the result's index when the chain is a strided view. A fused
// kernel can then read the input through that function instead of the
// chain's copies being written and read back (the exporter's reshapes of q,
// k and v around attention were a quarter of a ViT step's kernel bytes).
//
// A view's dim is a list of factors, outermost first, each `size` indices
// `stride` elements apart: a reshape can merge dims that are not contiguous
// (ViT's [L, N, H*D] -> [L, N*H, D] after a transpose), and such a dim stays
// two factors until a later reshape splits it again. A fused kernel iterates
// over the common refinement of its views' factors, so every read is
// offset + sum(index_i * stride_i).
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_DIALECTS_NN_IR_VIEWS_H
#define GRAPHC_DIALECTS_NN_IR_VIEWS_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/SmallVector.h"

namespace graphc::nn {

/// `size` consecutive indices of a dim, `stride` elements apart.
struct ViewFactor {
  int64_t size, stride;
  bool operator==(const ViewFactor &o) const { return size == o.size && stride == o.stride; }
};

/// Where each element of a tensor lies in the row-major buffer it is a view
/// of: per dim, its factors (outermost first; none for a dim of size 1), and
/// the offset of element 0.
struct StridedView {
  llvm::SmallVector<llvm::SmallVector<ViewFactor, 2>, 4> dims;
  int64_t offset = 0;

  /// A row-major tensor of `shape`, viewed as itself.
  static StridedView rowMajor(llvm::ArrayRef<int64_t> shape);
  /// Whether it reads its buffer in order from its start (a copy would be a
  /// no-op, or a prefix of the buffer).
  bool isIdentity() const;
  /// One past the furthest element it reads.
  int64_t extent() const;
  /// Whether it reads the first elements of a buffer of `elements` in order,
  /// and not all of them, through consecutive factors (a slice of the
  /// outermost dim from 0; a bias's first features broadcast over leading
  /// dims): a kernel's loop could then index the buffer by one loop
  /// variable alone, and linalg would take that loop's bound from the whole
  /// buffer a kernel argument must be. No kernel reads through such a view.
  /// Not when a repeated dim (stride 0) lies between the factors it reads:
  /// no loop spans it (ViT's q reading the first third of the bias).
  bool isPrefix(int64_t elements) const;
};

/// nn.reshape, nn.flatten, nn.transpose, nn.slice.
bool isViewOp(mlir::Operation *op);
/// An nn.broadcast of a fusion input that a view reads (a bias broadcast to
/// a projection's shape, then transposed with it): the first link of a
/// chain, stride 0 along the dims it stretches.
bool isViewStart(mlir::Operation *op);
/// The view ops that cost a copy on their own: nn.transpose and nn.slice (a
/// reshape or flatten of a tensor is a view of its buffer already).
bool isCopyingViewOp(mlir::Operation *op);

/// Applies view op `op` (or an nn.broadcast) to `view` (a view of `op`'s
/// input); fails when the result is no strided view (a reshape that splits a
/// factor unevenly, a slice across factors).
mlir::LogicalResult applyViewOp(mlir::Operation *op, StridedView &view);

/// The view `chain` (view ops, each reading the one before, the first
/// reading a row-major tensor of `shape`) makes; failure as applyViewOp.
mlir::FailureOr<StridedView> viewOfChain(llvm::ArrayRef<mlir::Operation *> chain,
                                         llvm::ArrayRef<int64_t> shape);

/// Per dim of `shape`, the factor sizes (outermost first, at least one) that
/// every view's factors of that dim are products of consecutive runs of:
/// the iteration space a kernel reading all of `views` at `shape` needs.
/// Failure when two views split a dim incompatibly (12 x 64 against 3 x 256).
mlir::FailureOr<llvm::SmallVector<llvm::SmallVector<int64_t, 2>, 4>>
refineDims(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<const StridedView *> views);

/// The stride of `view` along each refined factor (flattened, dim by dim);
/// `refined` must come from refineDims with `view` among the views.
llvm::SmallVector<int64_t> stridesOn(const StridedView &view,
                                     llvm::ArrayRef<llvm::SmallVector<int64_t, 2>> refined);

} // namespace graphc::nn

#endif // GRAPHC_DIALECTS_NN_IR_VIEWS_H
