#include "tensorsafe/formats/detect.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <vector>

#include "io/env.h"
#include "util/endian.h"

namespace tensorsafe {
namespace {

bool StartsWith(std::span<const std::byte> b, std::string_view magic) {
  return b.size() >= magic.size() && std::memcmp(b.data(), magic.data(), magic.size()) == 0;
}

std::string LowerExtension(std::string_view path) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) return "";
  std::string ext(path.substr(dot + 1));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

}  // namespace

std::string_view FormatName(Format f) {
  switch (f) {
    case Format::kTsafe: return "tsafe";
    case Format::kNpy: return "npy";
    case Format::kNpz: return "npz";
    case Format::kSafetensors: return "safetensors";
    case Format::kTenbin: return "tenbin";
    case Format::kBtf: return "btf";
    case Format::kGguf: return "gguf";
    case Format::kZio: return "zio";
    case Format::kUnknown: break;
  }
  return "unknown";
}

Format DetectFormatFromBytes(std::span<const std::byte> b, std::string_view path) {
  if (StartsWith(b, std::string_view("\x89TSF\r\n\x1a\n", 8))) return Format::kTsafe;
  if (StartsWith(b, "\x93NUMPY")) return Format::kNpy;
  if (StartsWith(b, "PK\x03\x04") || StartsWith(b, "PK\x05\x06")) return Format::kNpz;
  if (StartsWith(b, "~TenBin~")) return Format::kTenbin;
  if (StartsWith(b, "GGUF")) return Format::kGguf;
  // ZIO single frame (docs/formats/zio.md §1): the header frame's length
  // prefix (one byte below 0xFF, or 0xFF and a big-endian u32), then
  // "ZIO" and the level digit.
  const auto zio_at = [&](std::size_t at) {
    return b.size() >= at + 4 && std::memcmp(b.data() + at, "ZIO", 3) == 0 &&
           static_cast<char>(b[at + 3]) >= '0' && static_cast<char>(b[at + 3]) <= '8';
  };
  if (!b.empty() && (static_cast<unsigned char>(b[0]) == 0xFF ? zio_at(5) : zio_at(1))) return Format::kZio;
  // safetensors: an 8-byte header length, then a JSON object.
  if (b.size() >= 9 && static_cast<char>(b[8]) == '{' && internal::Load64(b.data()) >= 2) {
    return Format::kSafetensors;
  }
  const std::string ext = LowerExtension(path);
  if (ext == "tsafe") return Format::kTsafe;
  if (ext == "npy") return Format::kNpy;
  if (ext == "npz") return Format::kNpz;
  if (ext == "safetensors") return Format::kSafetensors;
  if (ext == "ten" || ext == "tenbin") return Format::kTenbin;
  if (ext == "btf") return Format::kBtf;
  if (ext == "gguf") return Format::kGguf;
  if (ext == "zio") return Format::kZio;
  return Format::kUnknown;
}

Result<Format> DetectFormat(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto file, internal::Env::Default()->OpenRead(path));
  std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(file->size(), 16)));
  TS_RETURN_IF_ERROR(file->ReadAt(0, head));
  return DetectFormatFromBytes(head, path);
}

}  // namespace tensorsafe
