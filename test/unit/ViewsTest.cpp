// Unit tests of the strided views fused kernels read through (Views.h): random
// chains of reshapes, transposes and slices against a reference that moves the
// elements themselves.

#include "dialects/nn/IR/NNOps.h"
#include "dialects/nn/IR/Views.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

using namespace mlir;
using graphc::nn::StridedView;

namespace {

/// A tensor whose elements are the offsets they came from in the chain's
/// input: what a copy of each op would write.
struct Moved {
  SmallVector<int64_t> shape;
  std::vector<int64_t> data;

  static Moved iota(ArrayRef<int64_t> shape) {
    Moved m{SmallVector<int64_t>(shape), {}};
    m.data.resize(count(shape));
    std::iota(m.data.begin(), m.data.end(), 0);
    return m;
  }
  static int64_t count(ArrayRef<int64_t> shape) {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  }
  /// The multi-index of flat position `flat` in `shape`.
  static SmallVector<int64_t> unflatten(int64_t flat, ArrayRef<int64_t> shape) {
    SmallVector<int64_t> index(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      index[d] = flat % shape[d];
      flat /= shape[d];
    }
    return index;
  }
  static int64_t flatten(ArrayRef<int64_t> index, ArrayRef<int64_t> shape) {
    int64_t flat = 0;
    for (auto [i, n] : llvm::zip(index, shape))
      flat = flat * n + i;
    return flat;
  }
  Moved transpose(ArrayRef<int64_t> perm) const {
    Moved out;
    for (int64_t p : perm)
      out.shape.push_back(shape[p]);
    out.data.resize(data.size());
    for (int64_t f = 0; f < static_cast<int64_t>(data.size()); ++f) {
      SmallVector<int64_t> index = unflatten(f, out.shape), in(shape.size());
      for (auto [i, p] : llvm::enumerate(perm))
        in[p] = index[i];
      out.data[f] = data[flatten(in, shape)];
    }
    return out;
  }
  Moved slice(int64_t dim, int64_t start, int64_t size) const {
    Moved out{shape, {}};
    out.shape[dim] = size;
    out.data.resize(count(out.shape));
    for (int64_t f = 0; f < static_cast<int64_t>(out.data.size()); ++f) {
      SmallVector<int64_t> index = unflatten(f, out.shape);
      index[dim] += start;
      out.data[f] = data[flatten(index, shape)];
    }
    return out;
  }
};

/// The offset `view` gives the element at `index`.
int64_t offsetOf(const StridedView &view, ArrayRef<int64_t> index) {
  int64_t offset = view.offset;
  for (auto [i, dim] : llvm::zip(index, view.dims)) {
    int64_t rest = i;
    for (const graphc::nn::ViewFactor &f : llvm::reverse(dim)) {
      offset += (rest % f.size) * f.stride;
      rest /= f.size;
    }
  }
  return offset;
}

class ViewsTest : public ::testing::Test {
protected:
  ViewsTest() : b(&context) {
    context.loadDialect<graphc::nn::NNDialect, func::FuncDialect>();
    module = ModuleOp::create(b.getUnknownLoc());
    b.setInsertionPointToEnd(module->getBody());
  }
  Value input(ArrayRef<int64_t> shape) {
    auto type = RankedTensorType::get(shape, b.getF32Type());
    auto func = b.create<func::FuncOp>(b.getUnknownLoc(), "f",
                                       b.getFunctionType({type}, {}));
    Block *entry = func.addEntryBlock();
    b.setInsertionPointToEnd(entry);
    return entry->getArgument(0);
  }
  Operation *reshape(Value v, ArrayRef<int64_t> shape) {
    auto type = RankedTensorType::get(shape, b.getF32Type());
    return b.create<graphc::nn::ReshapeOp>(b.getUnknownLoc(), type, v,
                                           b.getDenseI64ArrayAttr(shape));
  }
  Operation *transpose(Value v, ArrayRef<int64_t> perm) {
    auto in = llvm::cast<RankedTensorType>(v.getType()).getShape();
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(in[p]);
    return b.create<graphc::nn::TransposeOp>(
        b.getUnknownLoc(), RankedTensorType::get(shape, b.getF32Type()), v,
        b.getDenseI64ArrayAttr(perm));
  }
  Operation *slice(Value v, int64_t dim, int64_t start, int64_t size) {
    SmallVector<int64_t> shape(llvm::cast<RankedTensorType>(v.getType()).getShape());
    shape[dim] = size;
    return b.create<graphc::nn::SliceOp>(b.getUnknownLoc(),
                                         RankedTensorType::get(shape, b.getF32Type()), v,
                                         dim, start, size);
  }

  MLIRContext context;
  OpBuilder b;
  OwningOpRef<ModuleOp> module;
};

/// Every element the view names is the one the copies would have moved there.
void expectSameElements(const StridedView &view, const Moved &moved) {
  for (int64_t f = 0; f < static_cast<int64_t>(moved.data.size()); ++f)
    ASSERT_EQ(offsetOf(view, Moved::unflatten(f, moved.shape)), moved.data[f])
        << "element " << f;
}

TEST_F(ViewsTest, ViTsQkvSplitIsOneStridedRead) {
  // torchvision's MultiheadAttention as exported: [L, N, 3E] -> q as [N, H, L, D].
  const int64_t L = 5, N = 2, H = 3, D = 4, E = H * D;
  Value x = input({L, N, 3 * E});
  SmallVector<Operation *> chain;
  auto add = [&](Operation *op) {
    chain.push_back(op);
    return op->getResult(0);
  };
  Value v = add(reshape(x, {L, N, 3, E}));
  v = add(reshape(v, {1, L, N, 3, E}));
  v = add(transpose(v, {3, 1, 2, 0, 4}));
  v = add(reshape(v, {3, L, N, E}));
  v = add(slice(v, 0, 1, 1)); // k
  v = add(reshape(v, {L, N, E}));
  v = add(reshape(v, {L, N * H, D}));
  v = add(transpose(v, {1, 0, 2}));
  v = add(reshape(v, {N, H, L, D}));
  add(transpose(v, {0, 1, 3, 2}));
  auto view = graphc::nn::viewOfChain(chain, {L, N, 3 * E});
  ASSERT_TRUE(succeeded(view));
  Moved m = Moved::iota({L, N, 3 * E})
                .slice(2, E, E) // the same k, by the numbers
                .transpose({1, 0, 2});
  // [N, L, E] -> [N, L, H, D] -> [N, H, D, L]
  m.shape = {N, L, H, D};
  m = m.transpose({0, 2, 3, 1});
  expectSameElements(*view, m);
  // Every dim one factor: k^T is [N, H, D, L] with strides (3E, D, 1, 3EN).
  ASSERT_EQ(view->dims.size(), 4u);
  EXPECT_EQ(view->offset, E);
  EXPECT_EQ(view->dims[0], (SmallVector<graphc::nn::ViewFactor, 2>{{N, 3 * E}}));
  EXPECT_EQ(view->dims[3], (SmallVector<graphc::nn::ViewFactor, 2>{{L, 3 * E * N}}));
}

TEST_F(ViewsTest, ABroadcastStartsAViewWithZeroStrides) {
  // A bias [6] over a [4, 2, 6] projection, split as q/k would be: [4, 2, 2, 3]
  // -> [2, 2, 4, 3], k = slice 1: element (0, j, i, c) is bias[3 + c].
  Value bias = input({6});
  Value like = b.create<func::FuncOp>(b.getUnknownLoc(), "g",
                                      b.getFunctionType({RankedTensorType::get({4, 2, 6},
                                                                               b.getF32Type())},
                                                        {}))
                   .addEntryBlock()
                   ->getArgument(0);
  auto spread = b.create<graphc::nn::BroadcastOp>(
      b.getUnknownLoc(), RankedTensorType::get({4, 2, 6}, b.getF32Type()), bias, like,
      b.getDenseI64ArrayAttr({2}));
  Operation *r = reshape(spread, {4, 2, 2, 3});
  Operation *t = transpose(r->getResult(0), {2, 1, 0, 3});
  Operation *k = slice(t->getResult(0), 0, 1, 1);
  auto view = graphc::nn::viewOfChain({spread, r, t, k}, {6});
  ASSERT_TRUE(succeeded(view));
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(offsetOf(*view, {0, j, i, c}), 3 + c);
  EXPECT_EQ(view->extent(), 6);
  EXPECT_FALSE(view->isIdentity());
  // q (slice 0) reads the bias's first 3 in order, its one read factor
  // innermost: a prefix, which no kernel may read through (a one-variable
  // index).
  Operation *q = slice(t->getResult(0), 0, 0, 1);
  auto first = graphc::nn::viewOfChain({spread, r, t, q}, {6});
  ASSERT_TRUE(succeeded(first));
  EXPECT_TRUE(first->isPrefix(6));
  EXPECT_FALSE(view->isPrefix(6));
  // Read factors with a repeated one between them (ViT's q of the bias,
  // [N, H, L, D] reading H and D): no loop spans them, so no prefix.
  StridedView between;
  between.dims = {{{2, 0}}, {{3, 4}}, {{5, 0}}, {{4, 1}}};
  EXPECT_FALSE(between.isPrefix(24));
  StridedView together;
  together.dims = {{{2, 0}}, {{3, 4}}, {{4, 1}}, {{5, 0}}};
  EXPECT_TRUE(together.isPrefix(24));
  EXPECT_FALSE(together.isPrefix(12));
}

TEST_F(ViewsTest, RandomChainsMatchTheCopies) {
  std::mt19937 rng(20261128);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % n); };
  const int64_t sizes[] = {1, 2, 3, 4, 6};
  int expressible = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    SmallVector<int64_t> shape;
    for (int64_t r = 1 + pick(4); r > 0; --r)
      shape.push_back(sizes[pick(5)]);
    b.setInsertionPointToEnd(module->getBody());
    Value v = input(shape);
    Moved m = Moved::iota(shape);
    SmallVector<Operation *> chain;
    for (int64_t n = 1 + pick(5); n > 0; --n) {
      int64_t rank = m.shape.size();
      switch (pick(3)) {
      case 0: { // a random permutation
        SmallVector<int64_t> perm(rank);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        chain.push_back(transpose(v, perm));
        m = m.transpose(perm);
        break;
      }
      case 1: { // a window of a dim
        int64_t dim = pick(rank), extent = m.shape[dim];
        int64_t start = pick(extent), size = 1 + pick(extent - start);
        chain.push_back(slice(v, dim, start, size));
        m = m.slice(dim, start, size);
        break;
      }
      default: { // the elements into random factors of their count
        int64_t count = Moved::count(m.shape);
        SmallVector<int64_t> next;
        for (int64_t left = count; left > 1 || next.empty();) {
          SmallVector<int64_t> divisors;
          for (int64_t d = 1; d <= left; ++d)
            if (left % d == 0)
              divisors.push_back(d);
          int64_t d = divisors[pick(divisors.size())];
          next.push_back(d);
          left /= d;
          if (left == 1 && pick(3) == 0)
            next.push_back(1);
        }
        chain.push_back(reshape(v, next));
        m.shape = next;
        break;
      }
      }
      v = chain.back()->getResult(0);
    }
    auto view = graphc::nn::viewOfChain(chain, shape);
    if (failed(view)) {
      ++refused;
      continue;
    }
    ++expressible;
    expectSameElements(*view, m);
    EXPECT_EQ(view->isIdentity(),
              llvm::all_of(llvm::enumerate(m.data),
                           [](auto e) { return e.value() == static_cast<int64_t>(e.index()); }));
    // Refined to itself and to a row-major read, the strides give the same offsets.
    StridedView plain = StridedView::rowMajor(m.shape);
    auto refined = graphc::nn::refineDims(m.shape, {&*view, &plain});
    ASSERT_TRUE(succeeded(refined));
    SmallVector<int64_t> strides = graphc::nn::stridesOn(*view, *refined);
    SmallVector<int64_t> flatShape;
    for (const auto &dim : *refined)
      llvm::append_range(flatShape, dim);
    ASSERT_EQ(strides.size(), flatShape.size());
    for (int64_t f = 0; f < static_cast<int64_t>(m.data.size()); ++f) {
      SmallVector<int64_t> index = Moved::unflatten(f, flatShape);
      int64_t offset = view->offset;
      for (auto [i, s] : llvm::zip(index, strides))
        offset += i * s;
      ASSERT_EQ(offset, m.data[f]) << "refined element " << f;
    }
  }
  // Most chains are views; the rest (a reshape across a transpose that no
  // stride can express) must be refused, never wrong.
  EXPECT_GT(expressible, 2000);
  EXPECT_GT(refused, 0);
}

TEST_F(ViewsTest, RefusesWhatNoStrideExpresses) {
  // [2, 3] transposed to [3, 2] and read back as [2, 3]: no stride steps it.
  Value x = input({2, 3});
  Operation *t = transpose(x, {1, 0});
  Operation *r = reshape(t->getResult(0), {2, 3});
  EXPECT_TRUE(failed(graphc::nn::viewOfChain({t, r}, {2, 3})));
  // A slice across a merged dim that is not whole runs of its inner factor.
  Value y = input({4, 6});
  Operation *u = transpose(y, {1, 0});
  Operation *m = reshape(u->getResult(0), {24});
  Operation *s = slice(m->getResult(0), 0, 1, 5);
  EXPECT_TRUE(failed(graphc::nn::viewOfChain({u, m, s}, {4, 6})));
}

TEST_F(ViewsTest, RefinesSplitsThatNestAndRefusesOthers) {
  // One view splits 12 as 3 x 4, another as 2 x 6: cuts at 4 and 6, which
  // no common factoring has.
  StridedView a, c, d;
  a.dims = {{{3, 1}, {4, 3}}};
  c.dims = {{{2, 1}, {6, 2}}};
  EXPECT_TRUE(failed(graphc::nn::refineDims({12}, {&a, &c})));
  // 3 x 4 and 6 x 2 nest: 3 x 2 x 2.
  d.dims = {{{6, 1}, {2, 6}}};
  auto refined = graphc::nn::refineDims({12}, {&a, &d});
  ASSERT_TRUE(succeeded(refined));
  EXPECT_EQ((*refined)[0], (SmallVector<int64_t, 2>{3, 2, 2}));
  // a's 4 (stride 3) covers the last two: strides 1, 6, 3.
  EXPECT_EQ(graphc::nn::stridesOn(a, *refined), (SmallVector<int64_t>{1, 6, 3}));
  EXPECT_EQ(graphc::nn::stridesOn(d, *refined), (SmallVector<int64_t>{2, 1, 6}));
}

} // namespace
