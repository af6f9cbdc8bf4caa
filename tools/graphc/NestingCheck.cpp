//===- NestingCheck.cpp - refuse inputs nested deeper than the parser can take ===//

#include "NestingCheck.h"

#include "llvm/ADT/Twine.h"

namespace graphc {

bool checkNesting(llvm::SourceMgr &sourceMgr, llvm::raw_ostream &os, unsigned maxNesting) {
  const llvm::MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  llvm::StringRef text = buffer->getBuffer();
  unsigned depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    char next = i + 1 < text.size() ? text[i + 1] : '\0';
    char previous = i > 0 ? text[i - 1] : '\0';
    if (c == '"') {  // a string literal, with backslash escapes
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && next == '/') {  // a comment, to the end of the line
      while (i < text.size() && text[i] != '\n')
        ++i;
      continue;
    }
    // `->`, `<=` and `>=` are not brackets.
    bool opens = c == '(' || c == '[' || c == '{' || (c == '<' && next != '=');
    bool closes = c == ')' || c == ']' || c == '}' ||
                  (c == '>' && previous != '-' && next != '=');
    if (closes && depth > 0)
      --depth;
    if (opens && ++depth > maxNesting) {
      sourceMgr.PrintMessage(os, llvm::SMLoc::getFromPointer(text.data() + i),
                             llvm::SourceMgr::DK_Error,
                             "nesting deeper than " + llvm::Twine(maxNesting) +
                                 " levels of (), [], {} or <>; no model needs that many, "
                                 "and the parser would run out of stack");
      return false;
    }
  }
  return true;
}

} // namespace graphc
