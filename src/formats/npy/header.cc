#include "formats/npy/header.h"

#include <string>

#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::npy::internal {

using tensorsafe::internal::CheckedAdd;
using tensorsafe::internal::CheckedMul;
namespace {

// A cursor over the dict text. Errors carry the byte position in the header.
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  // Python allows these between tokens of a bracketed expression.
  void SkipSpace() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r' || s_[p_] == '\f')) {
      ++p_;
    }
  }
  bool AtEnd() const { return p_ >= s_.size(); }
  char Peek() const { return AtEnd() ? '\0' : s_[p_]; }
  bool Eat(char c) {
    SkipSpace();
    if (Peek() != c) return false;
    ++p_;
    return true;
  }
  std::size_t pos() const { return p_; }

  Status Error(const std::string& what) const {
    std::string found = AtEnd() ? "end of header" : "'" + Printable(s_.substr(p_, 12)) + "'";
    return Corruption("header dict at byte " + std::to_string(p_) + ": " + what + ", found " + found);
  }

  // A Python string literal in single or double quotes, without escapes
  // (NumPy never writes any; a backslash is refused rather than interpreted).
  Result<std::string> String() {
    SkipSpace();
    const char q = Peek();
    if (q != '\'' && q != '"') return Error("expected a quoted string");
    std::size_t i = p_ + 1;
    std::string out;
    while (i < s_.size() && s_[i] != q) {
      if (s_[i] == '\\') {
        p_ = i;
        return Error("escape sequences are not supported in header strings");
      }
      if (s_[i] == '\n') {
        p_ = i;
        return Error("unterminated string");
      }
      out.push_back(s_[i++]);
    }
    if (i >= s_.size()) return Error("unterminated string");
    p_ = i + 1;
    return out;
  }

  Result<bool> Bool() {
    SkipSpace();
    if (s_.substr(p_, 4) == "True") {
      p_ += 4;
      return true;
    }
    if (s_.substr(p_, 5) == "False") {
      p_ += 5;
      return false;
    }
    return Error("expected True or False");
  }

  // A non-negative decimal int as Python 3 writes it; Python 2's "L" suffix
  // (old 64-bit files on some platforms) is accepted.
  Result<std::uint64_t> Int() {
    SkipSpace();
    const std::size_t start = p_;
    std::uint64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      auto m = CheckedMul(v, 10);
      auto a = m ? CheckedAdd(*m, static_cast<std::uint64_t>(Peek() - '0')) : std::nullopt;
      if (!a) {
        p_ = start;
        return Error("dimension does not fit in 64 bits");
      }
      v = *a;
      ++p_;
    }
    if (p_ == start) return Error("expected a non-negative integer");
    if (s_[start] == '0' && p_ - start > 1) {
      p_ = start;
      return Error("integer with a leading zero");
    }
    if (Peek() == 'L') ++p_;
    return v;
  }

 private:
  static std::string Printable(std::string_view s) {
    std::string o;
    for (char c : s) o.push_back(c >= 0x20 && c < 0x7f ? c : '?');
    return o;
  }
  std::string_view s_;
  std::size_t p_ = 0;
};

Result<Shape> ParseShape(Parser& p, std::uint32_t max_rank) {
  if (!p.Eat('(')) {
    if (p.Peek() == '[') return p.Error("shape must be a tuple, not a list");
    return p.Error("expected '(' to open the shape tuple");
  }
  Shape shape;
  bool trailing_comma = false;
  while (!p.Eat(')')) {
    if (!shape.empty() && !trailing_comma) return p.Error("expected ',' or ')' in the shape");
    if (shape.size() >= max_rank) {
      return LimitExceeded("header dict: shape has more than " + std::to_string(max_rank) +
                           " dimensions (the rank limit)");
    }
    TS_ASSIGN_OR_RETURN(std::uint64_t d, p.Int());
    shape.push_back(d);
    trailing_comma = p.Eat(',');
  }
  // "(3)" is the int 3 in Python, not a tuple.
  if (shape.size() == 1 && !trailing_comma) return p.Error("a 1-element shape needs a trailing comma");
  return shape;
}

}  // namespace

Result<HeaderDict> ParseHeaderDict(std::string_view text, std::uint32_t max_rank) {
  Parser p(text);
  HeaderDict h;
  bool seen[3] = {false, false, false};
  if (!p.Eat('{')) return p.Error("expected '{' to open the header dict");
  bool need_comma = false;
  while (!p.Eat('}')) {
    if (need_comma) return p.Error("expected ',' or '}' after a value");
    TS_ASSIGN_OR_RETURN(std::string key, p.String());
    if (!p.Eat(':')) return p.Error("expected ':' after key '" + key + "'");
    int k;
    if (key == "descr") {
      k = 0;
      p.SkipSpace();
      if (p.Peek() == '[') {
        return Unsupported("header dict: descr is a list: structured (record) dtypes are not supported");
      }
      TS_ASSIGN_OR_RETURN(h.descr, p.String());
    } else if (key == "fortran_order") {
      k = 1;
      TS_ASSIGN_OR_RETURN(h.fortran_order, p.Bool());
    } else if (key == "shape") {
      k = 2;
      TS_ASSIGN_OR_RETURN(h.shape, ParseShape(p, max_rank));
    } else {
      // Quoted with escapes: the key is the file's bytes, not always UTF-8.
      return Corruption("header dict: unexpected key " + tensorsafe::internal::QuoteName(key) +
                        " (only 'descr', 'fortran_order' and 'shape' are allowed)");
    }
    if (seen[k]) return Corruption("header dict: key '" + key + "' appears twice");
    seen[k] = true;
    need_comma = !p.Eat(',');
  }
  p.SkipSpace();
  if (!p.AtEnd()) return p.Error("expected only spaces and a newline after the dict");
  static const char* kNames[3] = {"descr", "fortran_order", "shape"};
  for (int k = 0; k < 3; ++k) {
    if (!seen[k]) return Corruption(std::string("header dict: key '") + kNames[k] + "' is missing");
  }
  return h;
}

std::string FormatHeaderDict(std::string_view descr, bool fortran_order, std::span<const std::uint64_t> shape) {
  std::string s = "{'descr': '";
  s += descr;
  s += "', 'fortran_order': ";
  s += fortran_order ? "True" : "False";
  s += ", 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  s += "), }";
  if (!shape.empty()) {
    const std::size_t digits = std::to_string(shape[fortran_order ? shape.size() - 1 : 0]).size();
    if (digits < kGrowthAxisDigits) s.append(kGrowthAxisDigits - digits, ' ');
  }
  return s;
}

std::string WrapHeader(const std::string& dict) {
  // +1 for the '\n'. NumPy always adds 1..64 spaces, never 0: a header that
  // would end exactly on a boundary gets a whole extra 64 bytes.
  auto wrap = [&](std::size_t prefix) {
    const std::size_t len = dict.size() + 1;
    const std::size_t pad = kDataAlign - (prefix + len) % kDataAlign;
    return len + pad;
  };
  std::string out(kMagic);
  std::size_t total = wrap(kPrefixV1);
  if (total <= 0xffff) {
    out.push_back('\x01');
    out.push_back('\x00');
    out.push_back(static_cast<char>(total & 0xff));
    out.push_back(static_cast<char>(total >> 8));
  } else {
    total = wrap(kPrefixV2);
    out.push_back('\x02');
    out.push_back('\x00');
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((total >> (8 * i)) & 0xff));
  }
  out += dict;
  out.append(total - dict.size() - 1, ' ');
  out.push_back('\n');
  return out;
}

}  // namespace tensorsafe::npy::internal
