// The tokens of the fast paths of the header and index readers
// (fast_header.cc, index_scan.cc): JSON as writers make it, read straight
// from the caller's bytes. Each method returns false at anything outside
// that form (an escape, a control character, a number that is not a plain
// unsigned integer), and the caller hands the text to its general reader.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tensorsafe::safetensors::internal {

class PlainJson {
 public:
  // `text` must be valid UTF-8 (the callers check all of it first), so a
  // string's bytes between its quotes are the string.
  explicit PlainJson(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

 protected:
  static bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
  void SkipSpace() {
    while (p_ != end_ && IsSpace(*p_)) ++p_;
  }
  bool Eat(char c) {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  bool AtEnd() {
    SkipSpace();
    return p_ == end_;
  }
  // ':' with the spaces around it.
  bool Colon() {
    SkipSpace();
    if (!Eat(':')) return false;
    SkipSpace();
    return true;
  }
  // ',' and the spaces after it, or the `close` that ends a list (then
  // `closed` is set); false for anything else.
  bool Next(char close, bool& closed) {
    SkipSpace();
    closed = Eat(close);
    if (closed) return true;
    if (!Eat(',')) return false;
    SkipSpace();
    return true;
  }

  // A string without escapes or control characters, scanned 16 bytes at a
  // time (SSE2, which every x86-64 has) or else eight (the classic
  // has-zero-byte and has-less-than word tests, whose lowest flagged byte is
  // exactly the first match: a borrow only flags bytes above it) for a
  // quote, a backslash or a byte below 0x20.
  bool String(std::string_view& out) {
    if (!Eat('"')) return false;
    const char* c = p_;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    for (; end_ - c >= 16; c += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c));
      // v < 0x20 (unsigned) is max(v, 0x20) != v.
      const __m128i hits = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                                        _mm_andnot_si128(_mm_cmpeq_epi8(_mm_max_epu8(v, space), v), _mm_set1_epi8(-1)));
      if (const int mask = _mm_movemask_epi8(hits); mask != 0)
        return Close(c + std::countr_zero(static_cast<unsigned>(mask)), out);
    }
#endif
    constexpr std::uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
    for (; end_ - c >= 8; c += 8) {
      std::uint64_t w;
      std::memcpy(&w, c, 8);
      const std::uint64_t q = w ^ (kOnes * '"'), b = w ^ (kOnes * '\\');
      const std::uint64_t hits = (((q - kOnes) & ~q) | ((b - kOnes) & ~b) | ((w - kOnes * 0x20) & ~w)) & kHighs;
      if (hits != 0) return Close(c + std::countr_zero(hits) / 8, out);
    }
    while (c != end_ && *c != '"' && *c != '\\' && static_cast<unsigned char>(*c) >= 0x20) ++c;
    return Close(c, out);
  }

  // Whether `key` is `word` (a literal): an inline compare, not a call.
  template <std::size_t N>
  static bool Is(std::string_view key, const char (&word)[N]) {
    return key.size() == N - 1 && std::memcmp(key.data(), word, N - 1) == 0;
  }

  // A JSON integer of 1 to 19 digits (so below 2^64): "0" or digits
  // without a leading zero, and no sign, fraction or exponent. `digits`
  // views them.
  bool Uint(std::uint64_t& value, std::string_view& digits) {
    const char* start = p_;
    std::uint64_t v = 0;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') v = v * 10 + static_cast<std::uint64_t>(*p_++ - '0');
    const auto n = p_ - start;
    if (n == 0 || n > 19 || (n > 1 && *start == '0')) return false;
    if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    value = v;
    digits = std::string_view(start, static_cast<std::size_t>(n));
    return true;
  }

  bool Peek(char c) const { return p_ != end_ && *p_ == c; }

  // Steps over `text` (a literal) when the input continues with it.
  template <std::size_t N>
  bool Literal(const char (&text)[N]) {
    if (end_ - p_ < static_cast<std::ptrdiff_t>(N - 1) || std::memcmp(p_, text, N - 1) != 0) return false;
    p_ += N - 1;
    return true;
  }

  // Ends String at `c`, which must be its closing quote.
  bool Close(const char* c, std::string_view& out) {
    if (c == end_ || *c != '"') return false;
    out = std::string_view(p_, static_cast<std::size_t>(c - p_));
    p_ = c + 1;
    return true;
  }

  const char* p_;
  const char* end_;
};

}  // namespace tensorsafe::safetensors::internal
