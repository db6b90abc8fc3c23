// The tar walk behind WebDataset shards (docs/formats/wds.md, "Tar reader
// checks"), and WebDataset's naming rules.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dataset/sources/wds/internal.h"
#include "tensorsafe/dataset/wds.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::wds {
namespace {

using internal::Member;

using tensorsafe::internal::QuoteName;

constexpr std::size_t kBlock = 512;

std::string_view Field(const std::byte* h, std::size_t off, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(h) + off;
  return {p, strnlen(p, len)};
}

// A numeric header field as tarfile reads it: octal digits after optional
// spaces, ended by NUL or space; empty is 0. Base-256 (first byte 0x80 or
// 0xff) holds sizes of 8 GiB and more.
std::optional<std::uint64_t> Number(const std::byte* h, std::size_t off, std::size_t len, bool* negative) {
  const auto* p = reinterpret_cast<const unsigned char*>(h) + off;
  *negative = false;
  if (p[0] == 0x80 || p[0] == 0xff) {
    if (p[0] == 0xff) {
      *negative = true;
      return std::nullopt;
    }
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < len; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | p[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < len && p[i] == ' ') ++i;
  std::uint64_t v = 0;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + (p[i] - '0');
  }
  for (; i < len; ++i) {  // only NUL / space may follow
    if (p[i] != 0 && p[i] != ' ') return std::nullopt;
  }
  return v;
}

bool AllZero(std::span<const std::byte> bytes) {
  for (std::byte b : bytes) {
    if (b != std::byte{0}) return false;
  }
  return true;
}

Status CheckPath(std::string_view path, const std::string& what) {
  if (path.empty()) return Corruption(what + ": empty member path");
  if (path.find('\0') != std::string_view::npos) return Corruption(what + ": NUL in member path");
  if (path.front() == '/') {
    return Corruption(what + ": unsafe member path " + QuoteName(path) + " (absolute)");
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (path.substr(start, slash - start) == "..") {
      return Corruption(what + ": unsafe member path " + QuoteName(path) + " (a .. component)");
    }
    start = slash + 1;
  }
  return Status::OK();
}

// pax records "<len> <key>=<value>\n"; sets path and size when present.
Status ParsePax(std::span<const std::byte> data, std::optional<std::string>* path, std::optional<std::uint64_t>* size,
                const std::string& what) {
  std::string_view s(reinterpret_cast<const char*>(data.data()), data.size());
  while (!s.empty()) {
    std::size_t sp = s.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp > 20) {
      return Corruption(what + ": malformed pax record length");
    }
    std::uint64_t len = 0;
    for (char c : s.substr(0, sp)) {
      if (c < '0' || c > '9') return Corruption(what + ": malformed pax record length");
      len = len * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (len <= sp + 1 || len > s.size() || s[len - 1] != '\n') {
      return Corruption(what + ": pax record of " + std::to_string(len) + " bytes overruns its " +
                        std::to_string(s.size()) + " remaining bytes");
    }
    std::string_view rec = s.substr(sp + 1, len - sp - 2);
    std::size_t eq = rec.find('=');
    if (eq == std::string_view::npos) return Corruption(what + ": pax record without '='");
    std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (key == "path") {
      *path = std::string(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      if (value.empty() || value.size() > 19) return Corruption(what + ": bad pax size");
      for (char c : value) {
        if (c < '0' || c > '9') return Corruption(what + ": bad pax size");
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      *size = v;
    }
    s.remove_prefix(len);
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<Member>> internal::ScanTar(std::span<const std::byte> tar, const std::string& name,
                                              const ReadOptions& options) {
  std::vector<Member> members;
  std::optional<std::string> next_path;
  std::optional<std::uint64_t> next_size;
  // The last x, g, L or K header not yet followed by another header: tarfile
  // reads the header after one as part of it and raises ReadError at end of
  // file or at a zero block, so a shard cut there lost the member it names.
  const char* pending = nullptr;
  std::uint64_t pending_at = 0;
  std::uint64_t pos = 0;
  const std::uint64_t total = tar.size();
  bool end_marker = false;
  while (total - pos >= kBlock) {
    const std::byte* h = tar.data() + pos;
    const std::string what = name + ": header at offset " + std::to_string(pos);
    if (AllZero(tar.subspan(pos, kBlock))) {  // end-of-archive marker
      end_marker = true;
      break;
    }
    bool neg = false;
    auto stored = Number(h, 148, 8, &neg);
    std::uint64_t usum = 0;
    std::int64_t ssum = 0;
    for (std::size_t i = 0; i < kBlock; ++i) {
      std::uint8_t b = (i >= 148 && i < 156) ? ' ' : static_cast<std::uint8_t>(h[i]);
      usum += b;
      ssum += static_cast<std::int8_t>(b);
    }
    if (!stored || (*stored != usum && static_cast<std::int64_t>(*stored) != ssum)) {
      return Corruption(what + ": checksum " + (stored ? std::to_string(*stored) : std::string("unreadable")) +
                        ", the header sums to " + std::to_string(usum));
    }
    auto size = Number(h, 124, 12, &neg);
    if (neg) return Unsupported(what + ": negative base-256 size");
    if (!size) return Corruption(what + ": size field is not octal");
    const char type = static_cast<char>(h[156]);
    if (next_size && type != 'x' && type != 'g' && type != 'L' && type != 'K') {
      size = *next_size;
      next_size.reset();
    }
    const std::uint64_t data_off = pos + kBlock;
    if (!tensorsafe::internal::RangeWithin(data_off, *size, total)) {
      return Corruption(what + ": member of " + std::to_string(*size) + " bytes at " + std::to_string(data_off) +
                        " runs past the archive's " + std::to_string(total) + " bytes");
    }
    std::span<const std::byte> data = tar.subspan(data_off, *size);
    // Padding cut short is refused as tarfile does ("unexpected end of
    // data"): no data is lost, but the file was cut. AlignUp cannot overflow:
    // size <= total - 512.
    const std::uint64_t padded = tensorsafe::internal::AlignUp(*size, kBlock).value_or(~std::uint64_t{0});
    if (padded > total - data_off) {
      return Corruption(what + ": member of " + std::to_string(*size) + " bytes at " + std::to_string(data_off) +
                        " is cut in its padding: the archive's " + std::to_string(total) +
                        " bytes end before the block boundary at " + std::to_string(data_off + padded));
    }
    const std::uint64_t next = data_off + padded;

    std::string header_path;
    std::string_view magic = Field(h, 257, 6);
    std::string_view base = Field(h, 0, 100);
    if (magic == "ustar" && std::memcmp(h + 257, "ustar\0", 6) == 0) {
      std::string_view prefix = Field(h, 345, 155);
      header_path = prefix.empty() ? std::string(base) : std::string(prefix) + "/" + std::string(base);
    } else {
      header_path = std::string(base);  // GNU ("ustar  ") and v7: no prefix field
    }

    pending = nullptr;
    switch (type) {
      case 'x':
        if (*size > options.max_extended_header_bytes) {
          return LimitExceeded(what + ": pax header of " + std::to_string(*size) + " bytes exceeds the limit " +
                               std::to_string(options.max_extended_header_bytes));
        }
        TS_RETURN_IF_ERROR(ParsePax(data, &next_path, &next_size, what));
        if (next_path && next_path->size() > options.max_path_bytes) {
          return LimitExceeded(what + ": pax path of " + std::to_string(next_path->size()) +
                               " bytes exceeds the limit " + std::to_string(options.max_path_bytes));
        }
        pending = "pax header";
        break;
      case 'g':  // global pax header: nothing in it changes how members are named
        if (*size > options.max_extended_header_bytes) {
          return LimitExceeded(what + ": pax global header of " + std::to_string(*size) + " bytes");
        }
        pending = "pax global header";
        break;
      case 'L': {
        if (*size > options.max_path_bytes) {
          return LimitExceeded(what + ": GNU long name of " + std::to_string(*size) + " bytes exceeds the limit " +
                               std::to_string(options.max_path_bytes));
        }
        std::string_view s(reinterpret_cast<const char*>(data.data()), data.size());
        next_path = std::string(s.substr(0, s.find('\0')));
        pending = "GNU long name";
        break;
      }
      case 'K':  // GNU long link name: links are skipped anyway
        pending = "GNU long link name";
        break;
      case 'S': return Unsupported(what + ": GNU sparse member");
      case '0':
      case '\0':
      case '7': {
        std::string path = next_path ? std::move(*next_path) : std::move(header_path);
        next_path.reset();
        if (type == '\0' && !path.empty() && path.back() == '/') break;  // old-style directory
        TS_RETURN_IF_ERROR(CheckPath(path, what));
        if (members.size() >= options.max_members) {
          return LimitExceeded(name + ": more than " + std::to_string(options.max_members) + " members");
        }
        members.push_back({std::move(path), data_off, *size});
        break;
      }
      default:  // directories, links, devices, FIFOs: WebDataset reads regular files only
        next_path.reset();
        break;
    }
    if (pending) pending_at = pos;
    pos = next;
  }
  // A tar is whole blocks. 1..511 bytes past the last block are a header cut
  // short (the member and all after it lost) unless all zero: an end marker
  // cut short, which loses nothing.
  const std::uint64_t rest = total - pos;
  if (!end_marker && rest > 0 && !AllZero(tar.subspan(pos, rest))) {
    return Corruption(name + ": header at offset " + std::to_string(pos) + " is cut short: " + std::to_string(rest) +
                      " of its " + std::to_string(kBlock) + " bytes before the end of the archive's " +
                      std::to_string(total) + " bytes");
  }
  if (pending) {
    return Corruption(name + ": " + pending + " at offset " + std::to_string(pending_at) + " names no member: " +
                      (end_marker ? "an all-zero block follows at offset " + std::to_string(pos)
                                  : "the archive ends at " + std::to_string(total) + " bytes"));
  }
  return members;
}

bool internal::SplitKey(std::string_view path, std::string_view* key, std::string_view* suffix) {
  // Emulates the regex ^((?:.*/|)[^.]+)[.]([^/]*)$ of tariterators.base_plus_ext.
  std::size_t slash = path.rfind('/');
  std::size_t bstart = slash == std::string_view::npos ? 0 : slash + 1;
  std::size_t dot = path.find('.', bstart);
  if (dot == std::string_view::npos) return false;
  if (dot > bstart) {
    *key = path.substr(0, dot);
    *suffix = path.substr(dot + 1);
    return true;
  }
  // The basename starts with '.': the regex backtracks into the directory
  // part, which matches only when it holds no dot; the key then ends in '/'.
  if (slash == std::string_view::npos) return false;
  if (path.substr(0, slash).find('.') != std::string_view::npos) return false;
  *key = path.substr(0, slash + 1);
  *suffix = path.substr(slash + 2);
  return true;
}

bool internal::IsMetaMember(std::string_view path) {
  // tar_file_iterator: "__*__" without '/', or a first component "__*__/"
  // (regex __[^/]*__($|/)).
  if (path.find('/') == std::string_view::npos) {
    return path.size() >= 2 && path.starts_with("__") && path.ends_with("__");
  }
  std::string_view first = path.substr(0, path.find('/'));
  return first.size() >= 4 && first.starts_with("__") && first.ends_with("__");
}

namespace {

Status Expand(std::string_view p, std::vector<std::string>& out, std::size_t max);

// Splits `s` at commas outside nested braces.
std::vector<std::string_view> TopLevelSplit(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}') --depth;
    if (s[i] == ',' && depth == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

bool ParseRange(std::string_view s, std::uint64_t* a, std::uint64_t* b, std::size_t* width) {
  std::size_t dd = s.find("..");
  if (dd == std::string_view::npos || dd == 0 || dd + 2 >= s.size()) return false;
  std::string_view x = s.substr(0, dd), y = s.substr(dd + 2);
  auto num = [](std::string_view t, std::uint64_t* v) {
    if (t.empty() || t.size() > 18) return false;
    *v = 0;
    for (char c : t) {
      if (c < '0' || c > '9') return false;
      *v = *v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return true;
  };
  if (!num(x, a) || !num(y, b)) return false;
  bool padded = (x.size() > 1 && x[0] == '0') || (y.size() > 1 && y[0] == '0');
  *width = padded ? std::max(x.size(), y.size()) : 0;
  return true;
}

Status Expand(std::string_view p, std::vector<std::string>& out, std::size_t max) {
  std::size_t open = p.find('{');
  if (open == std::string_view::npos) {
    if (p.find('}') != std::string_view::npos) return InvalidArgument("unbalanced '}' in " + QuoteName(p));
    if (out.size() >= max) return LimitExceeded("brace pattern expands to more than " + std::to_string(max) + " names");
    out.emplace_back(p);
    return Status::OK();
  }
  int depth = 0;
  std::size_t close = std::string_view::npos;
  for (std::size_t i = open; i < p.size(); ++i) {
    if (p[i] == '{') ++depth;
    if (p[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
  }
  if (close == std::string_view::npos) return InvalidArgument("unbalanced '{' in " + QuoteName(p));
  std::string_view head = p.substr(0, open), body = p.substr(open + 1, close - open - 1), tail = p.substr(close + 1);
  std::vector<std::string> alternatives;
  std::uint64_t a, b;
  std::size_t width;
  auto parts = TopLevelSplit(body);
  if (parts.size() > 1) {
    for (std::string_view part : parts) TS_RETURN_IF_ERROR(Expand(part, alternatives, max));
  } else if (ParseRange(body, &a, &b, &width)) {
    std::uint64_t count = (a <= b ? b - a : a - b) + 1;
    if (count > max)
      return LimitExceeded("brace range " + QuoteName(body) + " has more than " + std::to_string(max) + " names");
    for (std::uint64_t k = 0; k < count; ++k) {
      std::string v = std::to_string(a <= b ? a + k : a - k);
      if (v.size() < width) v.insert(0, width - v.size(), '0');
      alternatives.push_back(std::move(v));
    }
  } else {
    return InvalidArgument("brace group " + QuoteName(body) + " is neither a list nor a numeric range");
  }
  for (const std::string& alt : alternatives) {
    std::string joined = std::string(head) + alt + std::string(tail);
    TS_RETURN_IF_ERROR(Expand(joined, out, max));
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<std::string>> ExpandBraces(std::string_view pattern, std::size_t max_names) {
  std::vector<std::string> out;
  TS_RETURN_IF_ERROR(Expand(pattern, out, max_names));
  return out;
}

}  // namespace tensorsafe::wds
