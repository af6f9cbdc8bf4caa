//===- Views.cpp - reshapes, transposes and slices as strided reads -------===//

#include "dialects/nn/IR/Views.h"

#include "dialects/nn/IR/NNOps.h"

#include <algorithm>

using namespace mlir;

namespace graphc::nn {

namespace {

using Factors = SmallVector<ViewFactor, 2>;

/// Merges neighbouring factors that are contiguous ((a, b*s), (b, s) is
/// (a*b, s)) and drops factors of size 1.
void normalize(Factors &factors) {
  Factors out;
  for (ViewFactor f : factors) {
    if (f.size == 1)
      continue;
    if (!out.empty() && out.back().stride == f.size * f.stride) {
      out.back() = {out.back().size * f.size, f.stride};
      continue;
    }
    out.push_back(f);
  }
  factors = std::move(out);
}

ArrayRef<int64_t> shapeOf(Value v) {
  return llvm::cast<RankedTensorType>(v.getType()).getShape();
}

/// A reshape of `view` to `shape`: its factors, in order, regrouped into the
/// new dims, a factor split where a dim ends inside it.
LogicalResult reshape(StridedView &view, ArrayRef<int64_t> shape) {
  SmallVector<ViewFactor> flat;
  for (const Factors &dim : view.dims)
    llvm::append_range(flat, dim);
  std::reverse(flat.begin(), flat.end()); // pop from the back: outermost first
  SmallVector<Factors, 4> dims;
  for (int64_t size : shape) {
    if (size < 1)
      return failure();
    Factors dim;
    int64_t need = size;
    while (need > 1) {
      if (flat.empty())
        return failure();
      ViewFactor f = flat.back();
      if (need % f.size == 0) {
        dim.push_back(f);
        need /= f.size;
        flat.pop_back();
      } else if (f.size % need == 0) {
        // The dim takes the factor's outer part; its inner part goes on.
        dim.push_back({need, f.stride * (f.size / need)});
        flat.back() = {f.size / need, f.stride};
        need = 1;
      } else {
        return failure();
      }
    }
    normalize(dim);
    dims.push_back(std::move(dim));
  }
  if (!flat.empty())
    return failure();
  view.dims = std::move(dims);
  return success();
}

} // namespace

StridedView StridedView::rowMajor(ArrayRef<int64_t> shape) {
  StridedView view;
  int64_t stride = 1;
  view.dims.resize(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1)
      view.dims[i].push_back({shape[i], stride});
    stride *= shape[i];
  }
  return view;
}

bool StridedView::isIdentity() const {
  if (offset != 0)
    return false;
  int64_t expected = 1;
  for (const Factors &dim : llvm::reverse(dims))
    for (const ViewFactor &f : llvm::reverse(dim)) {
      if (f.stride != expected)
        return false;
      expected *= f.size;
    }
  return true;
}

bool StridedView::isPrefix(int64_t elements) const {
  if (offset != 0)
    return false;
  SmallVector<ViewFactor> all;
  for (const Factors &dim : dims)
    llvm::append_range(all, dim);
  auto read = [](const ViewFactor &f) { return f.stride != 0; };
  auto first = llvm::find_if(all, read);
  if (first == all.end())
    return false; // one element, a constant index
  auto last = std::find_if(all.rbegin(), all.rend(), read).base();
  // A repeated dim between the read ones: no loop ever indexes it alone.
  if (!std::all_of(first, last, read))
    return false;
  int64_t expected = 1;
  for (auto it = last; it != first;) {
    --it;
    if (it->stride != expected)
      return false;
    expected *= it->size;
  }
  return expected < elements;
}

int64_t StridedView::extent() const {
  int64_t last = offset;
  for (const Factors &dim : dims)
    for (const ViewFactor &f : dim)
      last += (f.size - 1) * f.stride;
  return last + 1;
}

bool isViewOp(Operation *op) {
  return llvm::isa<ReshapeOp, FlattenOp, TransposeOp, SliceOp>(op);
}

bool isCopyingViewOp(Operation *op) { return llvm::isa<TransposeOp, SliceOp>(op); }

bool isViewStart(Operation *op) {
  auto broadcast = llvm::dyn_cast_or_null<BroadcastOp>(op);
  return broadcast && broadcast->hasOneUse() && isViewOp(*broadcast->getUsers().begin());
}

LogicalResult applyViewOp(Operation *op, StridedView &view) {
  if (llvm::isa<ReshapeOp, FlattenOp>(op)) {
    auto type = llvm::cast<RankedTensorType>(op->getResult(0).getType());
    if (!type.hasStaticShape())
      return failure();
    return reshape(view, type.getShape());
  }
  if (auto transpose = llvm::dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = transpose.getPermutation();
    if (perm.size() != view.dims.size())
      return failure();
    SmallVector<Factors, 4> dims;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(view.dims.size()))
        return failure();
      dims.push_back(view.dims[p]);
    }
    view.dims = std::move(dims);
    return success();
  }
  if (auto broadcast = llvm::dyn_cast<BroadcastOp>(op)) {
    // Output dim d reads input dim i where dims[i] = d, unless it stretches
    // a 1; the others repeat (stride 0).
    auto out = llvm::cast<RankedTensorType>(broadcast.getType());
    ArrayRef<int64_t> dims = broadcast.getDims();
    auto in = llvm::cast<RankedTensorType>(broadcast.getInput().getType());
    if (!out.hasStaticShape() || dims.size() != view.dims.size())
      return failure();
    SmallVector<Factors, 4> result(out.getRank());
    for (int64_t d = 0; d < out.getRank(); ++d) {
      auto at = llvm::find(dims, d);
      if (at != dims.end() && !(in.getDimSize(at - dims.begin()) == 1 && out.getDimSize(d) != 1))
        result[d] = view.dims[at - dims.begin()];
      else if (out.getDimSize(d) != 1)
        result[d] = {{out.getDimSize(d), 0}};
      normalize(result[d]);
    }
    view.dims = std::move(result);
    return success();
  }
  if (auto slice = llvm::dyn_cast<SliceOp>(op)) {
    int64_t d = slice.getDim(), start = slice.getStart(), size = slice.getSize();
    if (d < 0 || d >= static_cast<int64_t>(view.dims.size()) || start < 0 || size < 1)
      return failure();
    Factors &dim = view.dims[d];
    if (dim.empty())
      return success(start == 0 && size == 1);
    // A window of the outermost factor: whole runs of the inner ones.
    int64_t inner = 1;
    for (const ViewFactor &f : llvm::drop_begin(dim))
      inner *= f.size;
    if (start % inner != 0 || size % inner != 0 || start / inner + size / inner > dim[0].size)
      return failure();
    view.offset += (start / inner) * dim[0].stride;
    dim[0].size = size / inner;
    normalize(dim);
    return success();
  }
  return failure();
}

FailureOr<StridedView> viewOfChain(ArrayRef<Operation *> chain, ArrayRef<int64_t> shape) {
  StridedView view = StridedView::rowMajor(shape);
  for (Operation *op : chain)
    if (failed(applyViewOp(op, view)))
      return failure();
  // Consistency with the chain's result type (a guard against a malformed op).
  if (!chain.empty()) {
    ArrayRef<int64_t> result = shapeOf(chain.back()->getResult(0));
    if (result.size() != view.dims.size())
      return failure();
    for (auto [size, dim] : llvm::zip(result, view.dims)) {
      int64_t n = 1;
      for (const ViewFactor &f : dim)
        n *= f.size;
      if (n != size)
        return failure();
    }
  }
  return view;
}

FailureOr<SmallVector<SmallVector<int64_t, 2>, 4>>
refineDims(ArrayRef<int64_t> shape, ArrayRef<const StridedView *> views) {
  SmallVector<SmallVector<int64_t, 2>, 4> refined;
  for (auto [d, size] : llvm::enumerate(shape)) {
    // The extents of each view's inner factor runs: a chain under division.
    SmallVector<int64_t> cuts = {size};
    for (const StridedView *view : views) {
      if (view->dims.size() != shape.size())
        return failure();
      int64_t extent = 1;
      for (const ViewFactor &f : llvm::reverse(view->dims[d])) {
        extent *= f.size;
        cuts.push_back(extent);
      }
      if (extent != size)
        return failure();
    }
    llvm::sort(cuts);
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    SmallVector<int64_t, 2> sizes;
    int64_t below = 1;
    for (int64_t cut : cuts) {
      if (cut % below != 0)
        return failure();
      if (cut != below)
        sizes.push_back(cut / below);
      below = cut;
    }
    if (sizes.empty())
      sizes.push_back(1);
    std::reverse(sizes.begin(), sizes.end());
    refined.push_back(std::move(sizes));
  }
  return refined;
}

SmallVector<int64_t> stridesOn(const StridedView &view,
                               ArrayRef<SmallVector<int64_t, 2>> refined) {
  SmallVector<int64_t> strides;
  for (auto [dim, sizes] : llvm::zip(view.dims, refined)) {
    SmallVector<int64_t, 2> own(sizes.size(), 0);
    // Innermost first: each view factor covers a run of refined factors.
    size_t r = sizes.size();
    for (const ViewFactor &f : llvm::reverse(dim)) {
      int64_t covered = 1;
      while (covered < f.size && r > 0) {
        own[--r] = f.stride * covered;
        covered *= sizes[r];
      }
    }
    llvm::append_range(strides, own);
  }
  return strides;
}

} // namespace graphc::nn
