//===- EscapingStream.h - diagnostics that cannot drive the terminal ------===//
//
// graphc echoes lines of the model file in its diagnostics (file:line:col,
// the line, a caret). A model file is input from anywhere: an escape sequence
// in it must not reach the terminal (set its title, clear the screen, move
// the cursor). This stream forwards everything to another one except control
// bytes (C0 but tab and newline, DEL, and C1 as UTF-8), which it writes as
// \xNN.
//
//===----------------------------------------------------------------------===//

#ifndef GRAPHC_TOOLS_GRAPHC_ESCAPINGSTREAM_H
#define GRAPHC_TOOLS_GRAPHC_ESCAPINGSTREAM_H

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace graphc {

class EscapingStream : public llvm::raw_ostream {
public:
  explicit EscapingStream(llvm::raw_ostream &out) : out(out) { SetUnbuffered(); }
  ~EscapingStream() override {
    flush();
    if (pendingC2)
      out << static_cast<char>(0xc2);
  }

  bool has_colors() const override { return out.has_colors(); }
  raw_ostream &changeColor(enum Colors color, bool bold, bool bg) override {
    out.changeColor(color, bold, bg);
    return *this;
  }
  raw_ostream &resetColor() override {
    out.resetColor();
    return *this;
  }

private:
  void write_impl(const char *data, size_t size) override {
    for (size_t i = 0; i < size; ++i) {
      unsigned char c = static_cast<unsigned char>(data[i]);
      if (pendingC2) {
        pendingC2 = false;
        if (c >= 0x80 && c <= 0x9f) { // a C1 control in UTF-8
          out << llvm::format("\\x%02x\\x%02x", 0xc2, c);
          continue;
        }
        out << static_cast<char>(0xc2);
      }
      if (c == 0xc2) {
        pendingC2 = true;
      } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        out << llvm::format("\\x%02x", c);
      } else {
        out << static_cast<char>(c);
      }
    }
  }
  uint64_t current_pos() const override { return 0; }

  llvm::raw_ostream &out;
  bool pendingC2 = false;
};

} // namespace graphc

#endif // GRAPHC_TOOLS_GRAPHC_ESCAPINGSTREAM_H
