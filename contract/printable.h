// Text from a file or a command line, fit to print on a terminal: names in a
// plan, a checkpoint or a data file are attacker-controlled, and an escape
// sequence in one must not reach the screen.

#ifndef GRAPHC_CONTRACT_PRINTABLE_H_
#define GRAPHC_CONTRACT_PRINTABLE_H_

#include <cstddef>
#include <string>

namespace graphc {

// `text` fit for a terminal: the bytes of control characters (C0, DEL, C1),
// of bidirectional overrides and of anything that is not UTF-8 written as
// \xNN escapes, a backslash as \\, and the result cut after `max_bytes` of
// input with "..." (names printed from a plan or a file are attacker-controlled).
std::string Printable(const std::string& text, size_t max_bytes = 256);

// Whether `text` is well-formed UTF-8 (what JSON, and so safetensors headers,
// require).
bool IsUtf8(const std::string& text);

}  // namespace graphc

#endif  // GRAPHC_CONTRACT_PRINTABLE_H_
