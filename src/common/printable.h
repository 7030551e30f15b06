// common/printable.h: the one rule for showing a string that came from a target — a mapped
// file's path, a module, ELF symbol, DWARF file, Lua chunk or call-site name, a reason that
// quotes any of them. Such strings are arbitrary bytes (a corrupt NT_FILE note, a chunk named
// by `load(code, "\27[2J")`), while every output needs well-formed UTF-8 (JSON, protobuf, XML)
// and a terminal must not receive bytes that drive it.
//
// The rule: a well-formed UTF-8 character (RFC 3629: no overlongs, no surrogates, nothing past
// U+10FFFF) that is printable is kept; every other byte is written as `\xNN` (two lower-case
// hex digits). Not printable: the C0 controls U+0000-U+001F (NUL, BEL, CR, LF, ESC...), DEL
// U+007F and the C1 controls U+0080-U+009F (ECMA-48: 0x9b is CSI, a whole escape sequence in
// one character); the line and paragraph separators U+2028/U+2029 (line breaks by UAX #14); the
// bidirectional formatting controls U+061C, U+200E/U+200F, U+202A-U+202E and U+2066-U+2069
// (UAX #9), which reorder how the rest of a line shows (CVE-2021-42574, "Trojan Source"); and the
// noncharacters U+FFFE/U+FFFF, which XML 1.0's Char production excludes. A control character's
// bytes are each escaped ("\xc2\x9b" for U+009B), as are the bytes of a malformed sequence, one
// at a time, so the next well-formed character is kept.
//
// A backslash is kept as it is, so the rule is idempotent: printable text passes unchanged,
// which lets a writer re-apply it as a guard and lets a profile written by ljprof be read back
// without growing escapes (the price: a name that itself contains the four characters `\x1b`
// shows the same as one holding an ESC byte).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ljprof {

namespace printable_detail {

// The length of the well-formed UTF-8 sequence at s[i] (Unicode 15 §3.9 table 3-7), 0 if the
// byte there starts none.
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  // The sequence length and the allowed range of its second byte (the one that rules out
  // overlongs, surrogates and > U+10FFFF); later bytes are plain 80..BF.
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return 0;
  }
  return len;
}

// The code point of the well-formed sequence of `len` bytes at s[i].
inline uint32_t utf8_code_point(std::string_view s, size_t i, size_t len) {
  static constexpr unsigned char kLeadMask[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
  uint32_t cp = static_cast<unsigned char>(s[i]) & kLeadMask[len];
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return cp;
}

inline bool is_printable_code_point(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return false;       // C0, DEL, C1
  if (cp == 0x061c || cp == 0x200e || cp == 0x200f) return false;  // ALM, LRM, RLM
  if (cp >= 0x2028 && cp <= 0x202e) return false;  // LS, PS, LRE, RLE, PDF, LRO, RLO
  if (cp >= 0x2066 && cp <= 0x2069) return false;  // LRI, RLI, FSI, PDI
  return cp != 0xfffe && cp != 0xffff;
}

// The length of the printable character at s[i]; 0 when the byte there is to be escaped.
inline size_t printable_length(std::string_view s, size_t i) {
  const size_t len = utf8_sequence_length(s, i);
  if (len == 0 || !is_printable_code_point(utf8_code_point(s, i, len))) return 0;
  return len;
}

}  // namespace printable_detail

// Whether `s` is already printable text (printable_text(s) == s).
inline bool is_printable_text(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = printable_detail::printable_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// `s` as printable, well-formed UTF-8 by the rule above.
inline std::string printable_text(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = printable_detail::printable_length(s, i);
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    const auto b = static_cast<unsigned char>(s[i++]);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

// In place; no copy when `s` is printable already (the common case: most names are ASCII).
inline void make_printable(std::string& s) {
  if (!is_printable_text(s)) s = printable_text(s);
}

}  // namespace ljprof
