// Text fit for a terminal (see printable.h).

#include "contract/printable.h"

#include <algorithm>
#include <cstdint>

namespace graphc {
namespace {

// The length of the well-formed UTF-8 sequence (no overlongs, no surrogates)
// at text[i], looking no further than `end`, and its code point; 0 if none.
size_t DecodeUtf8(const std::string& text, size_t i, size_t end, uint32_t* code) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  const size_t length = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                        : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (length == 0 || i + length > end) return 0;
  uint32_t value = length == 1 ? c : length == 2 ? c & 0x1f : length == 3 ? c & 0x0f : c & 0x07;
  for (size_t k = 1; k < length; ++k) {
    const unsigned char next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xc0) != 0x80) return 0;
    value = (value << 6) | (next & 0x3f);
  }
  if ((length == 3 && (value < 0x800 || (value >= 0xd800 && value <= 0xdfff))) ||
      (length == 4 && (value < 0x10000 || value > 0x10ffff)))
    return 0;
  *code = value;
  return length;
}

}  // namespace

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
    uint32_t code = 0;
    size_t length = DecodeUtf8(text, i, n, &code);
    // Kept unless a C0 or C1 control, DEL, or a bidirectional override or
    // isolate; a backslash doubled.
    const bool control = code < 0x20 || (code >= 0x7f && code < 0xa0) ||
                         (code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069) ||
                         code == 0x200e || code == 0x200f || code == 0x061c;
    if (length == 0 || control) {
      for (size_t k = 0; k < std::max<size_t>(length, 1); ++k)
        escape(static_cast<unsigned char>(text[i + k]));
      i += std::max<size_t>(length, 1);
      continue;
    }
    if (code == '\\') out += '\\';
    out.append(text, i, length);
    i += length;
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

bool IsUtf8(const std::string& text) {
  uint32_t code;
  for (size_t i = 0, length; i < text.size(); i += length)
    if ((length = DecodeUtf8(text, i, text.size(), &code)) == 0) return false;
  return true;
}

}  // namespace graphc
