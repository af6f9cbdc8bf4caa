//===- NestingCheck.h - refuse inputs nested deeper than the parser can take ===//
//
// MLIR's parser is recursive descent: every level of a nested attribute or
// type costs it about 1 KiB of stack, so a model file with an attribute
// nested a few thousand deep overflows an 8 MiB stack and kills graphc with
// SIGSEGV before any diagnostic. Scanning the text first turns that into a
// located error.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_TOOLS_GRAPHC_NESTINGCHECK_H
#define GRAPHC_TOOLS_GRAPHC_NESTINGCHECK_H

#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace graphc {

/// Far deeper than any model (ResNet-50's file nests 4 deep), far shallower
/// than what overflows the stack (about 6,000).
constexpr unsigned kMaxNesting = 256;

/// Reports on `os` (as file:line:col: error: ...) the first place where the
/// main buffer's (), [], {} or <> nest deeper than `maxNesting`, skipping
/// string literals and comments; false if it does.
bool checkNesting(llvm::SourceMgr &sourceMgr, llvm::raw_ostream &os,
                  unsigned maxNesting = kMaxNesting);

} // namespace graphc

#endif // GRAPHC_TOOLS_GRAPHC_NESTINGCHECK_H
