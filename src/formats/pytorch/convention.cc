// convert.py's handling of shared tensors (convention.h), step by step as
// huggingface/safetensors writes it: bindings/python/convert.py
// (convert_file, _remove_duplicate_names) and py_src/safetensors/torch.py
// (_find_shared_tensors, _filter_shared_not_shared, _is_complete, _end_ptr).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "formats/pytorch/convention.h"
#include "util/text.h"

namespace tensorsafe::pytorch::internal {

Result<nlohmann::ordered_json> ApplySafetensorsConvention(std::vector<Entry>& entries, const Tables& tables,
                                                          const std::vector<std::string>& discard,
                                                          const std::string& file) {
  struct Area {
    std::uint64_t start = 0, end = 0;  // bytes from the root storage's start
    bool complete = false;
  };
  std::vector<Area> areas(entries.size());
  // _find_shared_tensors: groups keyed by (device, storage_ptr,
  // storage_size), in the order each key is first met; tensors of an empty
  // storage belong to none. A legacy view storage is its own storage, at an
  // offset in its root's memory.
  std::map<std::tuple<std::size_t, std::uint64_t, std::uint64_t>, std::size_t> group_of;
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const TensorDecl& t = tables.tensors[entries[i].tensor];
    const StorageDecl& s = tables.storages[t.storage];
    const std::size_t root = s.view_of ? *s.view_of : t.storage;
    const std::uint64_t base = s.view_of ? s.view_offset : 0;
    const std::uint64_t itemsize = TorchDTypeAt(t.dtype).itemsize;
    std::uint64_t numel = 1, extent = 0;
    for (std::size_t d = 0; d < t.shape.size(); ++d) numel *= t.shape[d];
    if (numel) {
      for (std::size_t d = 0; d < t.shape.size(); ++d) extent += (t.shape[d] - 1) * t.stride[d];
    }
    // _end_ptr: view(-1)[-1].data_ptr() + itemsize, which is the last
    // element's end for every tensor view(-1) accepts; for the others
    // (convert.py fails on them) the same formula.
    Area& a = areas[i];
    a.start = base + t.offset * itemsize;
    a.end = numel ? a.start + (extent + 1) * itemsize : a.start;
    a.complete = t.offset == 0 && numel * itemsize == s.nbytes;  // _is_complete
    if (s.nbytes == 0) continue;
    auto [it, inserted] = group_of.try_emplace({root, base, s.nbytes}, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  // sorted() of disjoint sets keeps their order. _filter_shared_not_shared
  // then splits each group by (data_ptr, end_ptr, name), comparing each
  // start with the previous tensor's end only.
  std::vector<std::vector<std::size_t>> filtered;
  for (std::vector<std::size_t>& g : groups) {
    if (g.size() < 2) {
      filtered.push_back(g);
      continue;
    }
    std::sort(g.begin(), g.end(), [&](std::size_t x, std::size_t y) {
      return std::tie(areas[x].start, areas[x].end, entries[x].name) <
             std::tie(areas[y].start, areas[y].end, entries[y].name);
    });
    filtered.push_back({g[0]});
    std::uint64_t last_stop = areas[g[0]].end;
    for (std::size_t k = 1; k < g.size(); ++k) {
      if (areas[g[k]].start >= last_stop) {
        filtered.push_back({g[k]});
      } else {
        filtered.back().push_back(g[k]);
      }
      last_stop = areas[g[k]].end;
    }
  }
  // _remove_duplicate_names (no preferred names): keep the smallest
  // complete name, the smallest not discarded when there is one; a lone
  // incomplete tensor is cloned (its bytes are what gets written anyway).
  std::vector<std::pair<std::string, std::vector<std::string>>> to_remove;
  for (const std::vector<std::size_t>& g : filtered) {
    std::vector<std::string> names, complete;
    for (std::size_t i : g) {
      names.push_back(entries[i].name);
      if (areas[i].complete) complete.push_back(entries[i].name);
    }
    if (complete.empty()) {
      if (g.size() == 1) continue;
      std::sort(names.begin(), names.end());
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + tensorsafe::internal::QuoteName(n);
      return Unsupported(file + ": tensors " + list +
                         " share a storage and none covers all of it; safetensors' convert.py refuses to save them "
                         "too (it would store more than the tensors hold)");
    }
    std::string keep = *std::min_element(complete.begin(), complete.end());
    std::vector<std::string> preferred;
    for (const std::string& n : complete) {
      if (std::find(discard.begin(), discard.end(), n) == discard.end()) preferred.push_back(n);
    }
    if (!preferred.empty()) keep = *std::min_element(preferred.begin(), preferred.end());
    std::sort(names.begin(), names.end());
    std::vector<std::string> drop;
    for (std::string& n : names) {
      if (n != keep) drop.push_back(std::move(n));
    }
    if (!drop.empty()) to_remove.emplace_back(keep, std::move(drop));
  }
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  metadata["format"] = "pt";
  std::set<std::string> removed;
  for (const auto& [keep, drop] : to_remove) {
    for (const std::string& r : drop) {
      if (!metadata.contains(r)) metadata[r] = keep;
      removed.insert(r);
    }
  }
  std::erase_if(entries, [&](const Entry& e) { return removed.count(e.name) != 0; });
  return metadata;
}

}  // namespace tensorsafe::pytorch::internal
