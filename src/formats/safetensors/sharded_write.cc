// Sharded checkpoints, writing (SHARDED.md §5): huggingface_hub's split,
// its file names and its index bytes (json.dump(indent=2)), each shard
// through its format's streaming writer.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "formats/safetensors/sharded_internal.h"
#include "io/atomic_file.h"
#include "remote/object_store.h"
#include "remote/remote_file.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/formats/sharded.h"
#include "util/text.h"

namespace tensorsafe::sharded {
namespace {

// A tensor's data bytes: its data's, or its info's for a tensor whose bytes
// are fetched only as its shard is written (a checkpoint at a URL).
std::uint64_t DataBytes(const Tensor& t) { return t.data.empty() ? t.info.data_length : t.data.size(); }

using json = nlohmann::ordered_json;

// The pattern split around its one "{suffix}".
struct Pattern {
  std::string prefix, suffix;
  std::string Name(std::string_view middle) const { return prefix + std::string(middle) + suffix; }
};

Result<Pattern> ParsePattern(const std::string& pattern) {
  const std::string key = "{suffix}";
  const auto at = pattern.find(key);
  if (at == std::string::npos) {
    return InvalidArgument("filename pattern \"" + pattern + "\" has no \"{suffix}\"");
  }
  Pattern p{pattern.substr(0, at), pattern.substr(at + key.size())};
  const std::string rest = p.prefix + p.suffix;
  if (rest.find_first_of("{}") != std::string::npos || rest.find('/') != std::string::npos || rest.empty()) {
    return InvalidArgument("filename pattern \"" + pattern +
                           "\" must be a file name with one \"{suffix}\" and no other braces or slashes");
  }
  return p;
}

std::string ShardMiddle(std::size_t i, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu", i + 1, n);
  return buf;
}

// Python's repr of a float, as json.dumps writes it.
std::string PythonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string out;
  if (s[0] == '-') {
    out = "-";
    s.erase(0, 1);
  }
  const auto e_at = s.find('e');
  std::string digits = s.substr(0, e_at);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(s.substr(e_at + 1));
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<std::size_t>(digits.size(), exp + 1));
      ip.append(static_cast<std::size_t>(exp + 1) - ip.size(), '0');
      std::string fp = digits.size() > static_cast<std::size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      return out + ip + "." + fp;
    }
    return out + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  }
  std::string m = digits.substr(0, 1);
  if (digits.size() > 1) m += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + m + e;
}

// json.dumps(value, indent=2) at nesting `level`.
bool AppendPython(std::string& out, const json& v, int level) {
  const std::string pad(static_cast<std::size_t>(2 * (level + 1)), ' ');
  const std::string close(static_cast<std::size_t>(2 * level), ' ');
  switch (v.type()) {
    case json::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return true;
      }
      out += "{\n";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ",\n";
        first = false;
        out += pad;
        if (!internal::AppendPythonJsonString(out, it.key())) return false;
        out += ": ";
        if (!AppendPython(out, it.value(), level + 1)) return false;
      }
      out += "\n" + close + "}";
      return true;
    }
    case json::value_t::array: {
      if (v.empty()) {
        out += "[]";
        return true;
      }
      out += "[\n";
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ",\n";
        out += pad;
        if (!AppendPython(out, v[i], level + 1)) return false;
      }
      out += "\n" + close + "]";
      return true;
    }
    case json::value_t::string: return internal::AppendPythonJsonString(out, v.get_ref<const std::string&>());
    case json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return true;
    case json::value_t::null: out += "null"; return true;
    case json::value_t::number_integer: out += std::to_string(v.get<std::int64_t>()); return true;
    case json::value_t::number_unsigned: out += std::to_string(v.get<std::uint64_t>()); return true;
    case json::value_t::number_float: out += PythonFloat(v.get<double>()); return true;
    default: return false;
  }
}

Result<json> ParseObject(std::string_view text, const char* what) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument(std::string(what) + " is not a JSON object");
  return j;
}

// The index text with a given "metadata" object.
Result<std::string> IndexTextWith(const json& metadata,
                                  std::span<const std::pair<std::string, std::string>> weight_map) {
  std::string out = "{\n  \"metadata\": ";
  if (!AppendPython(out, metadata, 1)) return InvalidArgument("index metadata is not UTF-8");
  out += ",\n  \"weight_map\": ";
  if (weight_map.empty()) {
    out += "{}";
  } else {
    out += "{\n";
    bool first = true;
    for (const auto& [name, file] : weight_map) {
      if (!first) out += ",\n";
      first = false;
      out += "    ";
      if (!internal::AppendPythonJsonString(out, name)) {
        return InvalidArgument("tensor " + tensorsafe::internal::QuoteName(name) + ": the name is not UTF-8");
      }
      out += ": ";
      if (!internal::AppendPythonJsonString(out, file)) return InvalidArgument("a shard name is not UTF-8");
    }
    out += "\n  }";
  }
  out += "\n}";
  return out;
}

// The default shard writer: the format table's, with its checks.
Status WriteShard(const std::string& path, const TensorSet& set, const WriteOptions& o) {
  FormatWriteOptions wo;
  wo.sync = o.sync;
  wo.alignment = o.alignment;
  return WriteTensorSet(path, set, o.format, wo);
}

bool IsShardMiddle(std::string_view m) {
  // "" or "-ddddd-of-ddddd", as the hub's cleanup regex.
  if (m.empty()) return true;
  if (m.size() != 15 || m[0] != '-' || m.substr(6, 4) != "-of-") return false;
  for (std::size_t i : {1, 2, 3, 4, 5, 10, 11, 12, 13, 14}) {
    if (m[i] < '0' || m[i] > '9') return false;
  }
  return true;
}

}  // namespace

namespace internal {

bool AppendPythonJsonString(std::string& out, std::string_view s) {
  if (!tensorsafe::internal::IsValidUtf8(s)) return false;
  static const char kHex[] = "0123456789abcdef";
  auto u = [&](std::uint32_t cp) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 0xF];
  };
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            u(c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // Valid UTF-8 (checked above): decode one code point.
    const int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    std::uint32_t cp = c & (len == 4 ? 0x07 : len == 3 ? 0x0F : 0x1F);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += static_cast<std::size_t>(len);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      u(0xD800 + (cp >> 10));
      u(0xDC00 + (cp & 0x3FF));
    } else {
      u(cp);
    }
  }
  out += '"';
  return true;
}

Result<WriteStats> WriteShardedWith(const std::string& dir, const TensorSet& set, const WriteOptions& o,
                                    std::span<const Storage> storages, const ShardWriter& write,
                                    const std::vector<std::vector<std::size_t>>& fixed,
                                    const std::vector<std::string>& per_shard_metadata,
                                    const std::string* verbatim_index_metadata) {
  if (o.format != Format::kSafetensors && o.format != Format::kTsafe) {
    return InvalidArgument("sharded checkpoints hold safetensors or tsafe shards, not " +
                           std::string(FormatName(o.format)));
  }
  const std::string pattern_text = o.filename_pattern.empty()
                                       ? std::string("model{suffix}.") + std::string(FormatName(o.format))
                                       : o.filename_pattern;
  TS_ASSIGN_OR_RETURN(Pattern pattern, ParsePattern(pattern_text));
  if (!storages.empty() && storages.size() != set.tensors.size()) {
    return InvalidArgument("storages: " + std::to_string(storages.size()) + " entries for " +
                           std::to_string(set.tensors.size()) + " tensors");
  }
  TS_ASSIGN_OR_RETURN(json shard_md, ParseObject(o.shard_metadata_json, "shard metadata"));
  TS_ASSIGN_OR_RETURN(json single_md, ParseObject(o.single_metadata_json, "file metadata"));
  TS_ASSIGN_OR_RETURN(json index_md, ParseObject(o.index_metadata_json, "index metadata"));

  ShardPlan plan;
  if (!fixed.empty()) {
    plan.shards = fixed;
    for (const auto& shard : fixed) {
      for (std::size_t pos : shard) plan.total_size += DataBytes(set.tensors[pos]);
    }
  } else if (storages.empty()) {
    std::vector<Storage> own(set.tensors.size());
    for (std::size_t i = 0; i < own.size(); ++i) own[i].size = DataBytes(set.tensors[i]);
    plan = PlanShards(own, o.max_shard_size);
  } else {
    plan = PlanShards(storages, o.max_shard_size);
  }
  const std::size_t n = plan.shards.size();
  const bool indexed = n > 1 || (n == 1 && (o.always_index || !fixed.empty()));
  if (n == 1 && !indexed) {
    // The hub lists every tensor of the state dict, in its order, when it
    // does not shard.
    plan.shards[0].resize(set.tensors.size());
    for (std::size_t i = 0; i < set.tensors.size(); ++i) plan.shards[0][i] = i;
  }

  // A URL is a prefix of objects (docs/REMOTE.md): each file is stored as
  // it is written, the index last, and nothing is made for the "directory".
  const bool at_url = tensorsafe::internal::IsRemotePath(dir);
  std::error_code ec;
  if (at_url) {
    TS_RETURN_IF_ERROR(tensorsafe::internal::CheckStorableUrl(dir));
  } else {
    std::filesystem::create_directories(dir, ec);
    if (ec) return IOError(dir + ": cannot create the directory: " + ec.message(), ec.value());
  }
  const std::string index_name = pattern.Name("") + ".index.json";
  const std::string index_path = (std::filesystem::path(dir) / index_name).string();
  tensorsafe::Env* env = tensorsafe::Env::Default();
  if (o.remove_stale && (at_url || std::filesystem::exists(index_path, ec))) {
    // First, so a failure below never leaves an old index over new shards.
    TS_RETURN_IF_ERROR(env->Remove(index_path));
  }

  WriteStats stats;
  stats.total_size = plan.total_size;
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::uint64_t written = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const std::string name = pattern.Name(indexed ? ShardMiddle(s, n) : "");
    TensorSet shard;
    shard.tensors.reserve(plan.shards[s].size());
    for (std::size_t pos : plan.shards[s]) {
      shard.tensors.push_back(set.tensors[pos]);
      if (indexed) weight_map.emplace_back(set.tensors[pos].info.name, name);
    }
    if (!per_shard_metadata.empty()) {
      shard.metadata_json = per_shard_metadata[s];
    } else {
      const json& md = indexed ? shard_md : single_md;
      shard.metadata_json =
          md.empty() && (indexed ? o.shard_metadata_json : o.single_metadata_json).empty() ? std::string() : md.dump();
    }
    const std::string path = (std::filesystem::path(dir) / name).string();
    TS_RETURN_IF_ERROR(write(path, shard));
    for (const Tensor& t : shard.tensors) written += DataBytes(t);
    if (o.progress) o.progress(written);
    stats.files.push_back(name);
  }
  if (indexed) {
    json metadata;
    if (verbatim_index_metadata != nullptr) {
      TS_ASSIGN_OR_RETURN(metadata, ParseObject(*verbatim_index_metadata, "index metadata"));
    } else {
      metadata = json::object();
      metadata["total_size"] = plan.total_size;
      for (auto it = index_md.begin(); it != index_md.end(); ++it) metadata[it.key()] = it.value();
    }
    TS_ASSIGN_OR_RETURN(std::string text, IndexTextWith(metadata, weight_map));
    TS_RETURN_IF_ERROR(tensorsafe::internal::WriteFileAtomically(index_path, std::as_bytes(std::span(text)), o.sync));
    stats.index_path = index_path;
  }
  if (o.remove_stale) {
    std::set<std::string> keep(stats.files.begin(), stats.files.end());
    if (indexed) keep.insert(index_name);
    std::vector<std::string> present;
    if (at_url) {
      const std::string prefix = (std::filesystem::path(dir) / pattern.prefix).string();
      TS_ASSIGN_OR_RETURN(std::vector<std::string> urls, tensorsafe::internal::ListObjects(prefix));
      for (std::string& u : urls) {
        if (u.find('/', prefix.size()) == std::string::npos) present.push_back(std::move(u));  // not deeper
      }
    } else {
      for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) present.push_back(entry.path().string());
    }
    for (const std::string& path : present) {
      const std::string name = path.substr(path.rfind('/') + 1);
      if (keep.count(name) || name.size() < pattern.prefix.size() + pattern.suffix.size() ||
          name.compare(0, pattern.prefix.size(), pattern.prefix) != 0) {
        continue;
      }
      std::string_view rest = std::string_view(name).substr(pattern.prefix.size());
      const std::string_view index_tail = ".index.json";
      if (rest.size() >= index_tail.size() && rest.substr(rest.size() - index_tail.size()) == index_tail) {
        rest.remove_suffix(index_tail.size());
      }
      if (rest.size() < pattern.suffix.size() || rest.substr(rest.size() - pattern.suffix.size()) != pattern.suffix) {
        continue;
      }
      rest.remove_suffix(pattern.suffix.size());
      if (IsShardMiddle(rest)) TS_RETURN_IF_ERROR(env->Remove(path));
    }
  }
  return stats;
}

}  // namespace internal

Result<std::uint64_t> ParseSize(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("size \"" + std::string(text) + "\": " + why +
                           " (a number of bytes, or a number with KB, MB, GB or TB)");
  };
  std::string t(text);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(0, 1);
  if (t.empty()) return bad("empty");
  if (std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::uint64_t v = 0;
    auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return bad("too large");
    return v;
  }
  if (t.size() < 3) return bad("no unit");
  std::string unit = t.substr(t.size() - 2);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult;
  if (unit == "TB") {
    mult = 1e12;
  } else if (unit == "GB") {
    mult = 1e9;
  } else if (unit == "MB") {
    mult = 1e6;
  } else if (unit == "KB") {
    mult = 1e3;
  } else {
    return bad("unit \"" + unit + "\" not supported");
  }
  std::string num = t.substr(0, t.size() - 2);
  while (!num.empty() && std::isspace(static_cast<unsigned char>(num.back()))) num.pop_back();
  double v = 0;
  auto r = std::from_chars(num.data(), num.data() + num.size(), v);
  if (num.empty() || r.ec != std::errc() || r.ptr != num.data() + num.size() || !(v >= 0)) {
    return bad("not a non-negative number");
  }
  const double bytes = v * mult;  // int(value * multiplier), as the hub computes it
  if (!(bytes < 18446744073709551616.0)) return bad("too large");
  return static_cast<std::uint64_t>(bytes);
}

ShardPlan PlanShards(std::span<const Storage> storages, std::uint64_t max_shard_size) {
  ShardPlan plan;
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::size_t> shard_of(storages.size(), kNone);
  std::vector<std::vector<std::size_t>> groups;  // positions sharing a storage, first-seen order
  std::map<std::uint64_t, std::size_t> group_of;
  std::vector<std::size_t> current;
  std::uint64_t current_size = 0;
  auto push = [&](std::vector<std::size_t> shard) {
    for (std::size_t pos : shard) shard_of[pos] = plan.shards.size();
    plan.shards.push_back(std::move(shard));
  };
  for (std::size_t pos = 0; pos < storages.size(); ++pos) {
    const Storage& st = storages[pos];
    if (st.has_id) {
      auto [it, inserted] = group_of.emplace(st.id, groups.size());
      if (!inserted) {
        groups[it->second].push_back(pos);
        continue;
      }
      groups.push_back({pos});
    }
    if (st.size > max_shard_size) {
      plan.total_size += st.size;
      push({pos});
      continue;
    }
    if (current_size + st.size > max_shard_size) {
      push(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(pos);
    current_size += st.size;
    plan.total_size += st.size;
  }
  if (!current.empty()) push(std::move(current));
  // Tensors sharing a storage join the shard of the first of them, after
  // its tensors (the hub re-assigns them in a second loop).
  for (const auto& positions : groups) {
    if (positions.size() < 2 || shard_of[positions[0]] == kNone) continue;
    auto& shard = plan.shards[shard_of[positions[0]]];
    shard.insert(shard.end(), positions.begin() + 1, positions.end());
  }
  return plan;
}

Result<std::string> IndexText(std::uint64_t total_size, std::string_view index_metadata_json,
                              std::span<const std::pair<std::string, std::string>> weight_map) {
  TS_ASSIGN_OR_RETURN(json extra, ParseObject(index_metadata_json, "index metadata"));
  json metadata = json::object();
  metadata["total_size"] = total_size;
  for (auto it = extra.begin(); it != extra.end(); ++it) metadata[it.key()] = it.value();
  return IndexTextWith(metadata, weight_map);
}

Result<WriteStats> WriteSharded(const std::string& dir, const TensorSet& set, const WriteOptions& options,
                                std::span<const Storage> storages) {
  return internal::WriteShardedWith(dir, set, options, storages, [&](const std::string& path, const TensorSet& shard) {
    return WriteShard(path, shard, options);
  });
}

}  // namespace tensorsafe::sharded
