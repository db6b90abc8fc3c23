// The .tsafe reader and updater under fuzzing: CheckTsafe compares the read
// paths against each other; CheckTsafeUpdate runs a transaction on the input.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_checks.h"
#include "fuzz_util.h"
#include "mem_env.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/updater.h"
#include "util/hash.h"

namespace tensorsafe::fuzz {
namespace {

// The work per input is bounded so that slow inputs stay fast: the first
// kMaxTensors tensors are read in full.
constexpr std::size_t kMaxTensors = 64;

std::string InfoText(const TensorInfo& t) {
  return "\"" + t.name + "\" " + std::string(DTypeName(t.dtype)) + ShapeToString(t.shape) + " layout " +
         std::to_string(static_cast<int>(t.layout)) + " @" + std::to_string(t.data_offset) + "+" +
         std::to_string(t.data_length) + " sum " + std::to_string(t.data_checksum) + " meta " + t.metadata_json;
}

// The hyperslab [start:stop:step] per dim derived from the shape and `k`, and
// the bytes it selects, gathered by hand from the whole tensor.
std::vector<SliceDim> MakeSlice(const Shape& shape, std::uint64_t k) {
  std::vector<SliceDim> s(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::uint64_t n = shape[d];
    const std::uint64_t a = n == 0 ? 0 : (k + d) % (n + 1);
    const std::uint64_t b = n == 0 ? 0 : a + (k * 7 + d) % (n - a + 1);
    s[d] = {a, b, 1 + (k + 3 * d) % 3};
    if ((k + d) % 5 == 0) s[d].step = ~std::uint64_t{0};  // huge steps select one element
  }
  return s;
}

std::string Gather(std::span<const std::byte> whole, const Shape& shape, std::span<const SliceDim> slice,
                   std::uint64_t es) {
  std::string out;
  std::vector<std::uint64_t> stride(shape.size());
  std::uint64_t st = es;
  for (std::size_t d = shape.size(); d-- > 0;) {
    stride[d] = st;
    st *= shape[d];
  }
  std::vector<std::uint64_t> count(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const SliceDim& s = slice[d];
    count[d] = s.stop == s.start ? 0 : (s.stop - s.start - 1) / s.step + 1;
    if (count[d] == 0) return out;
  }
  std::vector<std::uint64_t> idx(shape.size(), 0);
  while (true) {
    std::uint64_t off = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) off += (slice[d].start + idx[d] * slice[d].step) * stride[d];
    out.append(reinterpret_cast<const char*>(whole.data() + off), es);
    std::size_t d = shape.size();
    bool done = true;
    while (d-- > 0) {
      if (++idx[d] < count[d]) {
        done = false;
        break;
      }
      idx[d] = 0;
    }
    if (done) break;
  }
  return out;
}

struct Observation {
  std::string text;  // everything the reader said, in order
  bool verified = false;
  std::vector<TensorInfo> infos;
};

// Reads everything `r` offers and checks what must hold within one reader.
// `file` is the whole input, to compare served bytes with.
Observation Observe(const Reader& r, std::span<const std::byte> file) {
  Observation o;
  std::string& t = o.text;
  const FileSummary s = r.summary();
  t += "summary " + std::to_string(s.tensor_count) + " " + std::to_string(s.index_offset) + " " +
       std::to_string(s.index_length) + " " + std::to_string(s.sequence) + " " + std::to_string(s.live_slot) + " " +
       std::to_string(s.alignment) + " " + std::to_string(s.data_bytes) + "\n";
  TS_FUZZ_CHECK(r.size() == s.tensor_count, "size() disagrees with the summary");
  auto meta = r.Metadata();
  t += "metadata " + (meta.ok() ? *meta : Describe(meta.status())) + "\n";
  Status each = r.ForEach([&](const TensorInfo& info) {
    o.infos.push_back(info);
    return true;
  });
  t += "foreach " + Describe(each) + "\n";
  auto names = r.Names();
  t += "names " + Describe(names.status()) + "\n";
  if (names.ok() && each.ok()) {
    TS_FUZZ_CHECK(names->size() == o.infos.size(), "Names() and ForEach() see different counts");
    for (std::size_t i = 0; i < o.infos.size(); ++i) {
      TS_FUZZ_CHECK((*names)[i] == o.infos[i].name, "Names() and ForEach() disagree at " + std::to_string(i));
    }
  }
  std::vector<std::string> damaged;
  Status verify = r.Verify(&damaged);
  o.verified = verify.ok();
  t += "verify " + Describe(verify) + " damaged";
  for (const auto& d : damaged) t += " \"" + d + "\"";
  t += "\n";
  // The index verified (only data checksums may fail): names are unique and
  // the hash table is complete.
  const bool index_ok = verify.ok() || (!damaged.empty() && verify.code() == StatusCode::kCorruption &&
                                        verify.message().find("data checksum mismatch") != std::string::npos);
  if (verify.ok()) TS_FUZZ_CHECK(each.ok() && meta.ok(), "Verify() passed but ForEach/Metadata failed");
  if (index_ok) {
    TS_FUZZ_CHECK(each.ok(), "the index verified but ForEach failed: " + Describe(each));
    TS_FUZZ_CHECK(o.infos.size() == s.tensor_count, "ForEach saw " + std::to_string(o.infos.size()) + " of " +
                                                        std::to_string(s.tensor_count) + " tensors");
    std::uint64_t sum = 0;
    for (const auto& i : o.infos) sum += i.data_length;
    TS_FUZZ_CHECK(sum == s.data_bytes, "summary data_bytes differs from the sum of the entries");
  }
  for (std::size_t i = 0; i < o.infos.size() && i < kMaxTensors; ++i) {
    const TensorInfo& info = o.infos[i];
    // Hash lookup vs sequential scan.
    auto found = r.Find(info.name);
    t += "find " + (found.ok() ? InfoText(*found) : Describe(found.status())) + "\n";
    if (index_ok) {
      TS_FUZZ_CHECK(found.ok(), "Find(\"" + info.name + "\") failed on a verified index: " + Describe(found.status()));
      TS_FUZZ_CHECK(InfoText(*found) == InfoText(info),
                    "Find and ForEach disagree: " + InfoText(*found) + " vs " + InfoText(info));
      TS_FUZZ_CHECK(r.Contains(info.name), "Contains(\"" + info.name + "\") is false");
    }
    if (!found.ok()) continue;
    const TensorInfo& fi = *found;
    // Bytes served equal the file's bytes at the entry's range.
    auto got = r.Get(info.name);
    t += "get " + Describe(got.status()) + "\n";
    std::span<const std::byte> whole;
    if (got.ok()) {
      whole = got->data;
      TS_FUZZ_CHECK(whole.size() == fi.data_length, "Get returned the wrong number of bytes");
      TS_FUZZ_CHECK(fi.data_offset <= file.size() && fi.data_length <= file.size() - fi.data_offset,
                    "an entry that decoded points past the file");
      TS_FUZZ_CHECK(AsText(whole) == AsText(file.subspan(fi.data_offset, fi.data_length)),
                    "Get returned bytes other than the file's");
    }
    std::vector<std::byte> buf(fi.data_length);
    Status plain = r.ReadInto(info.name, buf, false);
    Status checked = r.ReadInto(info.name, buf, true);
    t += "readinto " + Describe(plain) + " / " + Describe(checked) + "\n";
    if (got.ok()) {
      TS_FUZZ_CHECK(plain.ok(), "Get worked, ReadInto did not: " + Describe(plain));
      TS_FUZZ_CHECK(AsText(buf) == AsText(whole), "ReadInto and Get disagree");
      const bool sum_ok = internal::Hash64(whole) == fi.data_checksum;
      TS_FUZZ_CHECK(checked.ok() == sum_ok, "ReadInto(verify) says " + Describe(checked) + " for a checksum that " +
                                                (sum_ok ? "matches" : "fails"));
      if (index_ok) {
        const bool listed = std::find(damaged.begin(), damaged.end(), info.name) != damaged.end();
        TS_FUZZ_CHECK(listed == !sum_ok,
                      "Verify's damaged list and the data checksum disagree for \"" + info.name + "\"");
      }
    }
    // Slices: a few hyperslabs against a hand gather of the whole tensor.
    const std::uint64_t es = ElementSize(fi.dtype);
    if (!got.ok() || es == 0) continue;
    for (std::uint64_t k = 0; k < 3; ++k) {
      std::vector<SliceDim> slice = MakeSlice(fi.shape, k + i);
      const std::string want = Gather(whole, fi.shape, slice, es);
      std::vector<std::byte> out(want.size());
      Status st = r.ReadSlice(info.name, slice, out);
      t += "slice " + Describe(st) + "\n";
      TS_FUZZ_CHECK(st.ok(), "ReadSlice of \"" + info.name + "\" failed: " + Describe(st));
      TS_FUZZ_CHECK(AsText(out) == want, "ReadSlice of \"" + info.name + "\" returned other bytes");
      // A buffer of the wrong size is refused.
      std::vector<std::byte> wrong(want.size() + 1);
      TS_FUZZ_CHECK(r.ReadSlice(info.name, slice, wrong).code() == StatusCode::kInvalidArgument,
                    "ReadSlice accepted a buffer of the wrong size");
    }
    // An out-of-range slice is refused.
    if (!fi.shape.empty() && fi.shape[0] != ~std::uint64_t{0}) {
      std::vector<SliceDim> bad = MakeSlice(fi.shape, 0);
      bad[0].stop = fi.shape[0] + 1;
      bad[0].start = 0;
      std::vector<std::byte> out(1);
      TS_FUZZ_CHECK(r.ReadSlice(info.name, bad, out).code() == StatusCode::kOutOfRange,
                    "a slice past the end was accepted");
    }
  }
  if (index_ok) {
    // A name that is not in the file is not found.
    std::string absent =
        "\x01"
        "absent";
    while (std::any_of(o.infos.begin(), o.infos.end(), [&](const TensorInfo& i) { return i.name == absent; })) {
      absent += "x";
    }
    auto miss = r.Find(absent);
    TS_FUZZ_CHECK(miss.status().code() == StatusCode::kNotFound, "Find of an absent name: " + Describe(miss.status()));
  }
  return o;
}

struct Opened {
  Status open;
  std::optional<Observation> seen;
};

const std::string& TempDirPath();

// How a reader gets the bytes: a real mapping of a file, a buffer in memory
// (OpenBuffer: the mapped code path without the file), or pread through an
// in-memory Env. All three name the file `path` in messages.
enum class Via { kFileMmap, kBuffer, kPread };

Opened OpenAndObserve(std::span<const std::byte> data, const std::string& path, Via via, ReaderOptions opt) {
  Opened out;
  Result<std::shared_ptr<Reader>> r = Status(StatusCode::kInternal, "unset");
  if (via == Via::kFileMmap) {
    opt.access = ReaderOptions::Access::kMmap;
    r = Reader::Open(path, opt);
  } else if (via == Via::kBuffer) {
    opt.access = ReaderOptions::Access::kMmap;
    auto copy = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    r = Reader::OpenBuffer(*copy, copy, path, opt);
  } else {
    opt.access = ReaderOptions::Access::kPread;
    MemReadEnv env(data);
    opt.env = &env;
    r = Reader::Open(path, opt);
  }
  if (!r.ok()) {
    out.open = r.status();
    return out;
  }
  out.seen = Observe(**r, data);
  return out;
}

std::string Text(const Opened& o) { return "open " + Describe(o.open) + "\n" + (o.seen ? o.seen->text : ""); }

}  // namespace

namespace {

std::uint64_t Get64(const std::string& b, std::uint64_t off) {
  std::uint64_t v;
  std::memcpy(&v, b.data() + off, 8);
  return v;
}
void Put64(std::string& b, std::uint64_t off, std::uint64_t v) { std::memcpy(b.data() + off, &v, 8); }
std::uint64_t H(const std::string& b, std::uint64_t off, std::uint64_t len) {
  return internal::Hash64(std::string_view(b).substr(off, len));
}

}  // namespace

// (fuzz_util.h) Recomputes every checksum of a .tsafe image that its
// (possibly mutated) structure still lets us find: identity, entry checks, section checksums,
// root, slot 0 and the trailer. Mutations then reach the checks behind the
// checksums (STYLE.md: "recompute the checksum after a mutation so the
// deeper checks run too"). Best effort: stops where offsets leave the file.
std::string Reseal(std::span<const std::byte> data) {
  std::string b(AsText(data));
  const std::uint64_t size = b.size();
  if (size < 176) return b;
  Put64(b, 24, H(b, 0, 24));
  bool slot_used = false;
  for (int i = 32; i < 80; ++i) slot_used |= b[i] != 0;
  const std::uint64_t p = slot_used ? 32 + 8 : size - 48;
  const std::uint64_t io = Get64(b, p + 8), il = Get64(b, p + 16);
  if (io > size || il > size - io || il < 128 || size - io - il < 48) return b;
  const std::uint64_t r = io;
  const std::uint64_t count = Get64(b, r + 8), elen = Get64(b, r + 24);
  if (elen <= il - 128) {
    std::uint64_t off = r + 128;
    const std::uint64_t end = off + elen;
    for (std::uint64_t i = 0; i < count && off + 8 <= end; ++i) {
      std::uint32_t len;
      std::memcpy(&len, b.data() + off, 4);
      if (len < 8 || len > end - off) break;
      const std::uint32_t check = static_cast<std::uint32_t>(H(b, off + 8, len - 8));
      std::memcpy(b.data() + off + 4, &check, 4);
      off += len;
    }
    Put64(b, r + 32, H(b, r + 128, elen));
  }
  auto section = [&](std::uint64_t rel, std::uint64_t len, std::uint64_t at) {
    if (rel <= il && len <= il - rel) Put64(b, r + at, H(b, r + rel, len));
  };
  const std::uint64_t cap = Get64(b, r + 48);
  if (cap < (std::uint64_t{1} << 60)) section(Get64(b, r + 40), 8 * cap, 56);
  section(Get64(b, r + 64), Get64(b, r + 72), 80);
  const std::uint64_t root_sum = H(b, r, 128);
  if (slot_used) {
    Put64(b, 32 + 32, root_sum);
    Put64(b, 32 + 40, H(b, 32, 40));
  }
  const std::uint64_t t = io + il;
  Put64(b, t + 24, root_sum);
  Put64(b, t + 32, H(b, t, 32));
  return b;
}

namespace {

void CheckTsafeBytes(std::span<const std::byte> data);

}  // namespace

void CheckTsafe(std::span<const std::byte> data) {
  CheckTsafeBytes(data);
  const std::string sealed = Reseal(data);
  if (sealed != AsText(data)) CheckTsafeBytes(AsBytes(sealed));
}

namespace {

void CheckTsafeBytes(std::span<const std::byte> data) {
  const std::string path = TempDirPath() + "/read.tsafe";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!f) Fail(__FILE__, __LINE__, "cannot write " + path);
  }
  ReaderOptions eager, lazy;
  eager.eager_index_bytes = ~std::uint64_t{0};
  lazy.eager_index_bytes = 0;
  Opened res[2][3];  // [eager, lazy][file mmap, buffer, pread]
  for (int e = 0; e < 2; ++e) {
    for (int a = 0; a < 3; ++a) res[e][a] = OpenAndObserve(data, path, static_cast<Via>(a), e == 0 ? eager : lazy);
  }
  // Mapped, buffer and pread readers say exactly the same things.
  for (int e = 0; e < 2; ++e) {
    for (int a = 1; a < 3; ++a) {
      TS_FUZZ_CHECK(Text(res[e][0]) == Text(res[e][a]), std::string(e == 0 ? "eager" : "lazy") + " mmap vs " +
                                                            (a == 1 ? "buffer" : "pread") + ":\n--- mmap\n" +
                                                            Text(res[e][0]) + "--- other\n" + Text(res[e][a]));
    }
  }
  const Opened& eg = res[0][0];
  const Opened& lz = res[1][0];
  if (!lz.open.ok()) {
    // Eager open runs every lazy open check first.
    TS_FUZZ_CHECK(Describe(eg.open) == Describe(lz.open),
                  "lazy open failed with " + Describe(lz.open) + ", eager open with " + Describe(eg.open));
  } else if (!eg.open.ok()) {
    // The eager open failure is a whole-index check, which a lazy Verify runs.
    TS_FUZZ_CHECK(eg.open.code() != StatusCode::kIOError, Describe(eg.open));
    TS_FUZZ_CHECK(!lz.seen->verified, "eager open failed (" + Describe(eg.open) + ") but lazy Verify passed");
    TS_FUZZ_CHECK(lz.seen->text.find("verify " + Describe(eg.open)) != std::string::npos,
                  "eager open failed with " + Describe(eg.open) + "; lazy reader said:\n" + lz.seen->text);
  } else {
    // Both opened: after an eager open the index is sound, so lazy access
    // sees the same.
    TS_FUZZ_CHECK(eg.seen->text == lz.seen->text,
                  "eager vs lazy:\n--- eager\n" + eg.seen->text + "--- lazy\n" + lz.seen->text);
  }
}

}  // namespace

// ---- the updater ----

namespace {

const std::string& TempDirPath() {
  // Never destroyed: the atexit handler that removes the directory runs after
  // static destructors may have run.
  static const std::string* dir = [] {
    const char* base = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(base && *base ? base : "/tmp") + "/tsafe-fuzz-XXXXXX");
    if (::mkdtemp(d->data()) == nullptr) Fail(__FILE__, __LINE__, "mkdtemp failed");
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(TempDirPath(), ec);
    });
    return d;
  }();
  return *dir;
}

struct ModelTensor {
  TensorInfo info;  // name, dtype, shape, metadata
  std::string data;
};
struct Model {
  std::vector<ModelTensor> tensors;  // file order
  std::string metadata;              // JSON text, "{}" when none
};

std::optional<Model> ReadModel(const std::string& path, std::string* why) {
  auto r = Reader::Open(path, {});
  if (!r.ok()) {
    *why = Describe(r.status());
    return std::nullopt;
  }
  Status v = (*r)->Verify();
  if (!v.ok()) {
    *why = Describe(v);
    return std::nullopt;
  }
  Model m;
  m.metadata = *(*r)->Metadata();
  Status s = (*r)->ForEach([&](const TensorInfo& i) {
    auto t = (*r)->Get(i.name);
    if (!t.ok()) return false;
    m.tensors.push_back({i, std::string(AsText(t->data))});
    return true;
  });
  if (!s.ok() || m.tensors.size() != (*r)->size()) {
    *why = "ForEach: " + Describe(s);
    return std::nullopt;
  }
  return m;
}

std::string ModelText(const Model& m) {
  std::string t = "metadata " + m.metadata + "\n";
  for (const auto& x : m.tensors) {
    t += "\"" + x.info.name + "\" " + std::string(DTypeName(x.info.dtype)) + ShapeToString(x.info.shape) + " " +
         x.info.metadata_json + " " + std::to_string(internal::Hash64(x.data)) + "\n";
  }
  return t;
}

ModelTensor* FindIn(Model& m, std::string_view name) {
  for (auto& t : m.tensors) {
    if (t.info.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

void CheckTsafeUpdate(std::span<const std::byte> input) {
  // The input with its checksums recomputed, so mutated files get past them.
  const std::string sealed = Reseal(input);
  const std::span<const std::byte> data = AsBytes(sealed);
  const std::string path = TempDirPath() + "/update.tsafe";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!f) Fail(__FILE__, __LINE__, "cannot write " + path);
  }
  std::string why;
  std::optional<Model> model = ReadModel(path, &why);
  UpdaterOptions uo;
  uo.sync = false;
  auto u = Updater::Open(path, uo);
  if (!u.ok()) {
    TS_FUZZ_CHECK(!model, "a file that verifies does not open for update: " + Describe(u.status()));
    return;
  }
  Updater& up = **u;
  // A live sequence of 2^64 - 1 has no successor: the commit is refused and
  // the file keeps what it had (FORMAT.md §10.1 step 4).
  const bool last_sequence = up.sequence() == std::numeric_limits<std::uint64_t>::max();
  const std::optional<Model> before = model;
  // A fixed transaction over whatever the file holds; each step's outcome is
  // predicted from the model when the file verified.
  const std::string new_name = "fuzz.added";
  const float vals[3] = {1.5f, -2.0f, 3.25f};
  const auto vbytes = std::as_bytes(std::span(vals));
  Status add = up.Add(new_name, TensorView::Contiguous(DType::kF32, {3}, vbytes), R"({"by":"fuzz"})");
  if (model) {
    const bool exists = FindIn(*model, new_name) != nullptr;
    TS_FUZZ_CHECK(add.ok() != exists, "Add: " + Describe(add));
    if (add.ok()) {
      TensorInfo i;
      i.name = new_name;
      i.dtype = DType::kF32;
      i.shape = {3};
      i.metadata_json = R"({"by":"fuzz"})";
      model->tensors.push_back({i, std::string(AsText(vbytes))});
    }
  }
  std::string first, second;
  if (auto names = [&]() -> std::vector<std::string> {
        std::vector<std::string> v;
        if (model) {
          for (const auto& t : model->tensors) v.push_back(t.info.name);
        }
        return v;
      }();
      names.size() >= 2) {
    first = names[0];
    second = names[1];
  }
  if (model && !first.empty() && first != new_name) {
    // Replace the first tensor (keeps its place and metadata).
    const std::uint8_t b[2] = {7, 9};
    Status rep = up.Replace(first, TensorView::Contiguous(DType::kU8, {2}, std::as_bytes(std::span(b))));
    TS_FUZZ_CHECK(rep.ok(), "Replace: " + Describe(rep));
    ModelTensor* t = FindIn(*model, first);
    t->info.dtype = DType::kU8;
    t->info.shape = {2};
    t->data = std::string("\x07\x09", 2);
    // Rename the second, unless its new name is taken.
    if (second != new_name) {
      const std::string to = second + ".renamed";
      Status ren = up.Rename(second, to);
      const bool taken = FindIn(*model, to) != nullptr;
      TS_FUZZ_CHECK(ren.ok() != taken, "Rename: " + Describe(ren));
      if (ren.ok()) FindIn(*model, second)->info.name = to;
      // Remove the first.
      Status rm = up.Remove(first);
      TS_FUZZ_CHECK(rm.ok(), "Remove: " + Describe(rm));
      model->tensors.erase(model->tensors.begin());
    }
  }
  Status mm = up.MergeMetadata(R"({"fuzz":{"n":1}})");
  if (model) {
    TS_FUZZ_CHECK(mm.ok(), "MergeMetadata: " + Describe(mm));
    auto staged = up.Metadata();
    TS_FUZZ_CHECK(staged.ok(), "Metadata: " + Describe(staged.status()));
    model->metadata = *staged;
  }
  Status c = up.Commit();
  if (!model) return;  // a damaged file: no crash is all we ask
  if (last_sequence) {
    TS_FUZZ_CHECK(c.code() == StatusCode::kOutOfRange, "Commit after sequence 2^64 - 1: " + Describe(c));
    model = before;
  } else {
    TS_FUZZ_CHECK(c.ok(), "Commit: " + Describe(c));
  }
  u->reset();
  std::optional<Model> after = ReadModel(path, &why);
  TS_FUZZ_CHECK(after.has_value(), "the committed file does not verify: " + why);
  TS_FUZZ_CHECK(ModelText(*after) == ModelText(*model),
                "after commit:\n--- file\n" + ModelText(*after) + "--- model\n" + ModelText(*model));
  for (std::size_t i = 0; i < after->tensors.size(); ++i) {
    TS_FUZZ_CHECK(after->tensors[i].data == model->tensors[i].data, "data of \"" + model->tensors[i].info.name + "\"");
  }
  auto cr = Compact(path, uo);
  TS_FUZZ_CHECK(cr.ok(), "Compact: " + Describe(cr.status()));
  std::optional<Model> compacted = ReadModel(path, &why);
  TS_FUZZ_CHECK(compacted.has_value(), "the compacted file does not verify: " + why);
  TS_FUZZ_CHECK(ModelText(*compacted) == ModelText(*model),
                "after compact:\n--- file\n" + ModelText(*compacted) + "--- model\n" + ModelText(*model));
}

}  // namespace tensorsafe::fuzz
