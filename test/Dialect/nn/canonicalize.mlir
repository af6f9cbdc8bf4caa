// RUN: graphc-opt %s -canonicalize -split-input-file | FileCheck %s

// Tests that identity casts, reshapes, flattens, broadcasts and zero-rate
// dropouts fold away.
// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32>)
// CHECK-NOT: nn.
// CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]]
func.func @identities(%x: tensor<2x3xf32>)
    -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = nn.cast %x : tensor<2x3xf32> to f32
  %1 = nn.reshape %x shape [2, 3] : tensor<2x3xf32>
  %2 = nn.flatten %x start_dim 1 : tensor<2x3xf32>
  %3 = nn.broadcast %x to %x dims [0, 1] : tensor<2x3xf32>, tensor<2x3xf32>
  %4 = nn.dropout %x rate 0.0 seed 1 : tensor<2x3xf32>
  return %0, %1, %2, %3, %4 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// Tests that a real cast and a real broadcast stay.
// CHECK-LABEL: func.func @not_identities
// CHECK: nn.cast
// CHECK: nn.broadcast
func.func @not_identities(%x: tensor<2x3xf32>, %v: tensor<3xf32>) -> (tensor<2x3xf16>, tensor<2x3xf32>) {
  %0 = nn.cast %x : tensor<2x3xf32> to f16
  %1 = nn.broadcast %v to %x dims [1] : tensor<3xf32>, tensor<2x3xf32>
  return %0, %1 : tensor<2x3xf16>, tensor<2x3xf32>
}

// -----

// Tests that double negation and repeated ReLU fold.
// CHECK-LABEL: func.func @involutions
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK: %[[R:.+]] = nn.relu %[[X]]
// CHECK-NOT: nn.relu
// CHECK-NOT: nn.neg
// CHECK: return %[[X]], %[[R]]
func.func @involutions(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = nn.neg %x : tensor<4xf32>
  %1 = nn.neg %0 : tensor<4xf32>
  %2 = nn.relu %x : tensor<4xf32>
  %3 = nn.relu %2 : tensor<4xf32>
  return %1, %3 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that x + 0, x - 0, x * 1, x / 1 and max(x, x) fold to x.
// CHECK-LABEL: func.func @neutral_elements
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK-NOT: nn.add
// CHECK-NOT: nn.sub
// CHECK-NOT: nn.mul
// CHECK-NOT: nn.div
// CHECK-NOT: nn.max
// CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]]
func.func @neutral_elements(%x: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %zero = nn.constant dense<0.0> : tensor<4xf32>
  %one = nn.constant dense<1.0> : tensor<4xf32>
  %0 = nn.add %x, %zero : tensor<4xf32>
  %1 = nn.sub %x, %zero : tensor<4xf32>
  %2 = nn.mul %one, %x : tensor<4xf32>
  %3 = nn.div %x, %one : tensor<4xf32>
  %4 = nn.max %x, %x : tensor<4xf32>
  return %0, %1, %2, %3, %4 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests constant folding of float arithmetic, splat and dense.
// CHECK-LABEL: func.func @constant_folding
// CHECK-DAG: nn.constant dense<5.000000e+00> : tensor<4xf32>
// CHECK-DAG: nn.constant dense<[3.000000e+00, 8.000000e+00]> : tensor<2xf32>
// CHECK-NOT: nn.add
// CHECK-NOT: nn.mul
func.func @constant_folding() -> (tensor<4xf32>, tensor<2xf32>) {
  %a = nn.constant dense<2.0> : tensor<4xf32>
  %b = nn.constant dense<3.0> : tensor<4xf32>
  %0 = nn.add %a, %b : tensor<4xf32>
  %c = nn.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %d = nn.constant dense<[3.0, 4.0]> : tensor<2xf32>
  %1 = nn.mul %c, %d : tensor<2xf32>
  %e = nn.constant dense<[0.0, 4.0]> : tensor<2xf32>
  %2 = nn.max %1, %e : tensor<2xf32>
  return %0, %2 : tensor<4xf32>, tensor<2xf32>
}

// -----

// Tests that a chain of reshapes becomes one, and a reshaped constant folds.
// CHECK-LABEL: func.func @reshape_chains
// CHECK-SAME: (%[[X:.+]]: tensor<2x6xf32>)
// CHECK: %[[C:.+]] = nn.constant dense<1.000000e+00> : tensor<3x2xf32>
// CHECK: %[[R:.+]] = nn.reshape %[[X]] shape [3, 4] : tensor<2x6xf32>
// CHECK: return %[[R]], %[[C]]
func.func @reshape_chains(%x: tensor<2x6xf32>) -> (tensor<3x4xf32>, tensor<3x2xf32>) {
  %0 = nn.reshape %x shape [12] : tensor<2x6xf32>
  %1 = nn.reshape %0 shape [3, 4] : tensor<12xf32>
  %c = nn.constant dense<1.0> : tensor<6xf32>
  %2 = nn.reshape %c shape [3, -1] : tensor<6xf32>
  return %1, %2 : tensor<3x4xf32>, tensor<3x2xf32>
}

// -----

// Tests that integer arithmetic on constants is left alone (the float folder
// must not see an integer splat) and that a chain of reshapes with a dynamic
// start keeps both reshapes, whose -1 would otherwise infer differently.
// CHECK-LABEL: func.func @not_folded
// CHECK: nn.add %{{.+}}, %{{.+}} : tensor<10xi32>
// CHECK: nn.reshape %{{.+}} shape [8] : tensor<?x4xf32>
// CHECK: nn.reshape %{{.+}} shape [-1, 2] : tensor<8xf32>
func.func @not_folded(%x: tensor<?x4xf32>) -> (tensor<10xi32>, tensor<4x2xf32>) {
  %a = nn.constant dense<1> : tensor<10xi32>
  %b = nn.add %a, %a : tensor<10xi32>
  %c = nn.reshape %x shape [8] : tensor<?x4xf32>
  %d = nn.reshape %c shape [-1, 2] : tensor<8xf32>
  return %b, %d : tensor<10xi32>, tensor<4x2xf32>
}

// -----

// Tests that ops using their own result (possible in a graph region) are not
// folded to themselves, which would never terminate. The assigns keep them
// alive.
// CHECK: %[[R:.+]] = nn.relu %[[R]] : tensor<4xf32>
// CHECK: %[[N:.+]] = nn.reshape %[[N]] shape [4] : tensor<4xf32>
// CHECK: %[[M:.+]] = nn.max %[[M]], %[[M]] : tensor<4xf32>
nn.state @s : tensor<4xf32> = zeros
%0 = nn.relu %0 : tensor<4xf32>
%1 = nn.reshape %1 shape [4] : tensor<4xf32>
%2 = nn.max %2, %2 : tensor<4xf32>
nn.assign @s, %0 : tensor<4xf32>
nn.assign @s, %1 : tensor<4xf32>
nn.assign @s, %2 : tensor<4xf32>

// -----

// Tests that an exact cast round trip folds (a half widened and narrowed back
// is itself) while a rounding one stays (f32 -> f16 -> f32 rounds), as does a
// round trip through a narrower mantissa (bf16 -> f16 -> bf16 is not exact:
// f16 lacks bf16's range).
// CHECK-LABEL: func.func @round_trips
// CHECK-SAME: (%[[H:.+]]: tensor<4xf16>, %[[X:.+]]: tensor<4xf32>, %[[B:.+]]: tensor<4xbf16>)
// CHECK: %[[R:.+]] = nn.cast %[[X]] : tensor<4xf32> to f16
// CHECK: %[[W:.+]] = nn.cast %[[R]] : tensor<4xf16> to f32
// CHECK: %[[N:.+]] = nn.cast %[[B]] : tensor<4xbf16> to f16
// CHECK: %[[M:.+]] = nn.cast %[[N]] : tensor<4xf16> to bf16
// CHECK: return %[[H]], %[[W]], %[[M]]
func.func @round_trips(%h: tensor<4xf16>, %x: tensor<4xf32>, %b: tensor<4xbf16>)
    -> (tensor<4xf16>, tensor<4xf32>, tensor<4xbf16>) {
  %0 = nn.cast %h : tensor<4xf16> to f32
  %1 = nn.cast %0 : tensor<4xf32> to f16
  %2 = nn.cast %x : tensor<4xf32> to f16
  %3 = nn.cast %2 : tensor<4xf16> to f32
  %4 = nn.cast %b : tensor<4xbf16> to f16
  %5 = nn.cast %4 : tensor<4xf16> to bf16
  return %1, %3, %5 : tensor<4xf16>, tensor<4xf32>, tensor<4xbf16>
}
