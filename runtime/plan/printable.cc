// Text fit for a terminal (see printable.h).

#include "runtime/plan/printable.h"

#include <algorithm>
#include <cstdint>

namespace graphc::runtime {

std::string Printable(const std::string& text, size_t max_bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  auto escape = [&](unsigned char byte) {
    out += "\\x";
    out += digits[byte >> 4];
    out += digits[byte & 15];
  };
  const size_t n = std::min(text.size(), max_bytes);
  for (size_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlongs, no surrogates) is kept
    // unless it is a C1 control or a bidirectional override or isolate.
    size_t length = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                    : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    uint32_t code = length == 2 ? c & 0x1f : length == 3 ? c & 0x0f : c & 0x07;
    bool valid = length != 0 && i + length <= n;
    for (size_t k = 1; valid && k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      code = (code << 6) | (next & 0x3f);
    }
    valid = valid && !(length == 3 && (code < 0x800 || (code >= 0xd800 && code <= 0xdfff))) &&
            !(length == 4 && (code < 0x10000 || code > 0x10ffff));
    const bool control = code < 0xa0 || (code >= 0x202a && code <= 0x202e) ||
                         (code >= 0x2066 && code <= 0x2069) || code == 0x200e ||
                         code == 0x200f || code == 0x061c;
    if (!valid) length = 1;
    if (!valid || control) {
      for (size_t k = 0; k < length; ++k) escape(static_cast<unsigned char>(text[i + k]));
    } else {
      out.append(text, i, length);
    }
    i += length;
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

bool IsUtf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t length = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                    : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code = length == 1 ? c : length == 2 ? c & 0x1f : length == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if ((length == 3 && (code < 0x800 || (code >= 0xd800 && code <= 0xdfff))) ||
        (length == 4 && (code < 0x10000 || code > 0x10ffff)))
      return false;
    i += length;
  }
  return true;
}

}  // namespace graphc::runtime
