// The format table: every tensor-file format tensorsafe reads and writes, one
// row each, `.tsafe` a row like the others. A row says what the format is
// called, how it is recognised, what it can hold, and where its read, decode,
// write and encode functions are. `convert`, the CLI (format lists, --from,
// --to, help text) and the Python package (`tensorsafe.formats`) iterate this
// table; none of them switches on a format.
//
// Adding a format: its codec folder (src/formats/<name>/ with a public
// header here), a Format value, and one row in src/formats/registry.cc
// (docs/CONTRIBUTING.md walks through it). The rows are plain structs of
// values and function pointers, built at compile time: no registration, no
// plugins.
//
// Thread safety: the table is immutable; every function is reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dtype.h"
#include "tensorsafe/env.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe {

// Not persisted anywhere: values may be added (at the end, before nothing
// else depends on their order).
enum class Format {
  kUnknown,
  kTsafe,        // "\x89TSF\r\n\x1a\n"
  kNpy,          // "\x93NUMPY"
  kNpz,          // a ZIP archive ("PK\x03\x04", or "PK\x05\x06" when empty)
  kSafetensors,  // u64 LE header length, then '{'
  kTenbin,       // "~TenBin~"
  kBtf,          // no magic: by the ".btf" extension only
  kGguf,         // "GGUF"
  kZio,          // single-frame ZIO message: a length prefix, then "ZIO" + level digit
  kPytorch,      // torch.save: a ZIP whose first member is "<archive>/data.pkl" (or
                 // another torch record), or the legacy magic-number pickle; read only
};

// What a format can hold. A conversion checks the input against the target's
// capabilities and refuses, naming the tensor, what would be lost unless the
// caller consents (Consent below; docs/CONVERT.md §2-§3).
struct Capabilities {
  enum class Metadata {
    kNone,     // nothing: file metadata is lost (consent: drop_metadata)
    kStrings,  // string values only (safetensors' __metadata__)
    kAny,      // any JSON object
  };
  Metadata file_metadata = Metadata::kNone;
  // Per-tensor metadata: any JSON object (kAny), only the keys the format
  // stores itself (kNone with own_tensor_keys), or none.
  Metadata tensor_metadata = Metadata::kNone;
  // The per-tensor keys the format stores as its own (tenbin's info, BTF's
  // COO marker, GGUF's block type), kept where the rest is dropped...
  std::span<const std::string_view> own_tensor_keys = {};
  // ...when this says they apply to a tensor's metadata JSON text (nullptr:
  // always). BTF's keys are its own only on a COO tensor, GGUF's only on a
  // quantized one.
  bool (*own_tensor_keys_apply)(std::string_view metadata_json) = nullptr;
  // An empty metadata object is told apart from none (tsafe's metadata
  // length 2 against 0; safetensors' "__metadata__":{} against none).
  bool empty_metadata_object = false;
  // Integers wider than 64 bits in metadata survive (the writer does not
  // re-encode them through a double).
  bool wide_integers = true;
  // True when a tensor of `dtype` is written and read back as `dtype`.
  bool (*holds_dtype)(DType dtype) = nullptr;
  std::uint32_t max_rank = 0;  // 0: no limit of the format's own
  bool sparse_coo = false;     // Layout::kCoo tensors as such
  bool alignment = false;      // FormatWriteOptions::alignment applies
  bool compress = false;       // FormatWriteOptions::compress applies
  bool checksums = false;      // TensorInfo::data_checksum is the XXH3-64 of each tensor's data
  // Each tensor's bytes lie at TensorInfo::data_offset, data_length long,
  // exactly as they load: nothing to decompress, byte-swap, unpickle or
  // unframe. The loader (tensorsafe/load.h) reads only these formats.
  bool loads_in_place = false;
  // Names: nullptr when every name is stored as given; otherwise checks the
  // names `set` would read back with, renaming what drop_names consents to,
  // and returns kInvalidArgument naming the first tensor whose name would
  // not survive (and the consent that would let it through).
  Status (*check_names)(TensorSet& set, bool drop_names) = nullptr;
};

// What `tensorsafe info` says of a file; the layout fields a format does not
// have stay unset.
struct FileDescription {
  Format format = Format::kUnknown;  // of the file; of a sharded checkpoint's shards
  std::string path;                  // the file described (a sharded checkpoint's index)
  std::uint64_t file_size = 0;       // on disk (a sharded checkpoint: its index and shards)
  std::uint64_t tensor_count = 0;
  std::uint64_t data_bytes = 0;  // the tensors' data bytes
  std::string metadata_json;     // "" when none
  std::optional<std::string> version;
  std::optional<std::uint64_t> alignment;
  std::optional<std::uint64_t> index_offset;  // the index (the native format)
  std::optional<std::uint64_t> index_length;
  std::optional<std::uint64_t> unused_bytes;  // padding and dead space
  // The live header slot's sequence number; 0 for a streamed file, whose
  // trailer alone points at the index.
  std::optional<std::uint64_t> header_sequence;

  // A sharded checkpoint (formats/sharded.h): its shards, the index's own
  // metadata, and each tensor's shard in file order (ForEachTensorInfo's);
  // all empty for a single file.
  struct Shard {
    std::string name;
    std::uint64_t file_size = 0;
    std::uint64_t tensor_count = 0;
  };
  std::vector<Shard> shards;
  std::optional<std::string> index_metadata_json;
  std::vector<std::uint32_t> shard_of;
};

struct FormatReadOptions {
  // Formats that can read without mapping the file (tsafe: positional reads
  // into buffers) do so: for NFS and other files that should not be mapped.
  bool pread = false;
  // The format the set will be written as, when known. A row with
  // FormatInfo::reads_for_target shapes the set for it: a PyTorch checkpoint
  // bound for safetensors drops the names of shared tensors as safetensors'
  // convert.py does, keeping none of `discard_names` (pytorch.h).
  Format target = Format::kUnknown;
  std::vector<std::string> discard_names;
  Env* env = nullptr;  // nullptr: Env::Default()
};

struct FormatWriteOptions {
  // tsafe: the data alignment (0 = 64). gguf: written as general.alignment
  // (uint32), replacing the input's. Other formats fix their own layout.
  std::uint32_t alignment = 0;
  bool compress = false;  // npz: deflate the members (np.savez_compressed)
  bool sync = true;       // fsync the output and its directory
  Env* env = nullptr;     // nullptr: Env::Default()
};

// What the caller consents to lose when the target cannot hold it. Each is
// false by default, and then writing fails instead (CONVERT.md §3). Shared by
// Convert, WriteTensorSet and Python's tensorsafe.write.
struct Consent {
  // safetensors: write non-string metadata values as their compact JSON text
  // (a nested object becomes the string "{\"a\":1}").
  bool stringify_metadata = false;
  // File metadata into a format without any (npy, npz, tenbin, btf): dropped.
  bool drop_metadata = false;
  // Per-tensor metadata into a format without it (all but tsafe and zio;
  // tenbin and btf keep their own keys, see CONVERT.md): dropped.
  bool drop_tensor_metadata = false;
  // Names into a format that cannot hold them (btf: positions only; tenbin:
  // 8 ASCII bytes): tensors are written under their position instead.
  bool drop_names = false;
  // Sparse COO tensors into a format without sparse tensors (all but tsafe
  // and btf): written as their dense equivalent, built in memory (zeros
  // where no element is stored; duplicate coordinates summed for integer,
  // f32 and f64 values, kUnsupported for other dtypes). A dense result
  // larger than max_densify_bytes is kLimitExceeded.
  bool densify = false;
  std::uint64_t max_densify_bytes = std::uint64_t{1} << 30;
};

struct FormatInfo {
  Format format;
  std::string_view name;                              // "safetensors": stable, lower case
  std::string_view description = {};                  // one line, for help text
  std::span<const std::string_view> aliases = {};     // other accepted names ("st")
  std::span<const std::string_view> extensions = {};  // lower case, no dot; the first is the one written
  // True when a file's first bytes (up to 16; fewer for a short file) are
  // this format's. nullptr: recognised by extension only (BTF).
  bool (*sniff)(std::span<const std::byte> prefix) = nullptr;
  // The sniff is a heuristic or a container another format shares
  // (safetensors: a length, then '{'; npz: any ZIP, and a torch.save archive
  // is a ZIP too): it is tried after every other sniff.
  bool weak_sniff = false;
  Capabilities caps = {};

  // A file as a TensorSet whose tensors view the file's mapping where the
  // format allows (and keep it alive). Errors: the codec's.
  Result<TensorSet> (*read_file)(const std::string& path, const FormatReadOptions& options) = nullptr;
  // The same from bytes held by `owner`; `name` is used in messages.
  Result<TensorSet> (*decode)(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                              const std::string& name) = nullptr;
  // Every check the format has (for `verify`): the names of damaged tensors
  // go to `damaged` when the format can tell them. nullptr: reading the file
  // with read_file is the full check.
  Status (*verify)(const std::string& path, std::vector<std::string>* damaged) = nullptr;
  // The file described; nullptr: counted from read_file's set.
  Result<FileDescription> (*describe)(const std::string& path) = nullptr;
  // Fast paths of a format with an index (tsafe), whose files may hold
  // millions of tensors, or a header (safetensors), read without the data
  // a URL would download; nullptr: read_file, then a walk of the set.
  // Visits every tensor's info in file order, memory not growing with the
  // count; `fn` returns false to stop.
  Status (*for_each_info)(const std::string& path, const std::function<bool(const TensorInfo&)>& fn) = nullptr;
  // One tensor by name, its bytes checked against its checksum.
  Result<Tensor> (*read_tensor)(const std::string& path, std::string_view name) = nullptr;

  // read_file honours FormatReadOptions::target and discard_names.
  bool reads_for_target = false;
  // For a read-only row: why, as the error a write gets (kUnsupported).
  std::string_view not_written = {};

  // Writes a set that PrepareForFormat accepted, through an AtomicFile:
  // `path` is untouched on failure. nullptr: the format is read-only.
  Status (*write_file)(const std::string& path, const TensorSet& set, const FormatWriteOptions& options) = nullptr;
  // The file's bytes in memory. nullptr: write_file only.
  Result<std::string> (*encode)(const TensorSet& set, const FormatWriteOptions& options) = nullptr;

  // Metadata hooks of formats with typed key/values (GGUF), nullptr for
  // the others. `metadata_json` with the "KEY=TYPE:VALUE" `sets` and the
  // KEY `dels` applied (convert --gguf-kv, meta --set/--del).
  Result<std::string> (*edit_metadata)(const std::string& metadata_json, std::span<const std::string> sets,
                                       std::span<const std::string> dels) = nullptr;
  // The file metadata of a set that came from this format, as any other
  // format should get it: this format's own bookkeeping (GGUF's
  // "tensorsafe.gguf_types") reduced to what still carries information, so
  // strings-only metadata goes back to a strings-only format unchanged.
  std::string (*metadata_elsewhere)(const std::string& metadata_json) = nullptr;
  // What a prepared set written in this format lacks for the format's usual
  // consumers (a GGUF without general.architecture, which llama.cpp and
  // transformers cannot load): one message each, for warnings.
  std::vector<std::string> (*write_warnings)(const TensorSet& set) = nullptr;
};

// Every format, kTsafe first, in a stable order.
std::span<const FormatInfo> AllFormats();
// The row of `format`; kUnknown has a row too (named "unknown", no functions).
const FormatInfo& InfoOf(Format format);
// A stable lower-case name: "tsafe", "npy", ..., "unknown".
std::string_view FormatName(Format format);
// A format from its name or an alias, case-insensitive; nullopt otherwise.
std::optional<Format> ParseFormat(std::string_view name);
// "tsafe, safetensors, npy, ..." for messages and help.
std::string FormatList();

// The prefix DetectFormat reads: enough for every sniff, a ZIP's first
// member name (which tells a torch.save archive from an .npz) included.
inline constexpr std::size_t kSniffBytes = 4096;
// Decides from the first bytes of a file (`prefix` may be shorter or empty)
// and its name. Magic wins over the extension. A ZIP whose first member is a
// torch.save record is kPytorch, any other kNpz.
Format DetectFormatFromBytes(std::span<const std::byte> prefix, std::string_view path);
// Reads the first bytes of `path` and decides. Errors: kIOError / kNotFound
// when the file cannot be read. An empty or unrecognised file is kUnknown,
// not an error.
Result<Format> DetectFormat(const std::string& path, Env* env = nullptr);

// Opens any supported file as a TensorSet: tensors view the file's mapping
// (docs/CONVERT.md lists the formats that copy) and keep it alive. A sharded
// checkpoint (an index or its directory; formats/sharded.h) opens as one
// set over all its shards. `format` kUnknown detects it. A .tsafe file's tensors carry their checksums in
// info.data_checksum (unchecked here; Capabilities::checksums). Per-tensor
// metadata reads as "" when absent or an empty object; file metadata as ""
// when absent. Errors: those of DetectFormat and of the format's reader;
// kUnsupported for an unrecognised file.
Result<TensorSet> ReadTensorSet(const std::string& path, Format format = Format::kUnknown,
                                const FormatReadOptions& options = {});
// The same from bytes held by `owner` (`format` must be known).
Result<TensorSet> DecodeTensorSet(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, Format format,
                                  const std::string& name = "<bytes>");

// The row's functions, or their generic forms over ReadTensorSet, for any
// file (`format` kUnknown detects it). ReadTensor checks a tensor's checksum
// where the format has one (kCorruption naming the tensor) and gives
// kNotFound for a missing name; VerifyFile runs every check the format has
// (FormatInfo::verify).
Result<FileDescription> DescribeFile(const std::string& path, Format format = Format::kUnknown);
Status ForEachTensorInfo(const std::string& path, Format format, const std::function<bool(const TensorInfo&)>& fn);
Result<Tensor> ReadTensor(const std::string& path, Format format, std::string_view name);
Status VerifyFile(const std::string& path, Format format = Format::kUnknown,
                  std::vector<std::string>* damaged = nullptr);

// Checks that `set` can be written as `to` without losing anything `consent`
// does not allow, and returns the set to hand to the writer (metadata
// stringified or dropped, names replaced, COO densified, as consented).
// Errors name the tensor: kInvalidArgument (options that do not apply, a
// name or metadata value the target cannot hold), kUnsupported (a dtype,
// rank, sparse tensor or metadata the target lacks), kLimitExceeded.
Result<TensorSet> PrepareForFormat(const TensorSet& set, Format to, const Consent& consent,
                                   const FormatWriteOptions& options = {});
// The same on a set the caller gives up: no copy of its entries (100,000
// names, shapes and metadata strings cost more than the checks).
Result<TensorSet> PrepareForFormat(TensorSet&& set, Format to, const Consent& consent,
                                   const FormatWriteOptions& options = {});

// PrepareForFormat, then the format's writer; nothing is written when a
// check fails. Errors as for PrepareForFormat, then the writer's (kIOError).
Status WriteTensorSet(const std::string& path, const TensorSet& set, Format to, const FormatWriteOptions& options = {},
                      const Consent& consent = {});
Status WriteTensorSet(const std::string& path, TensorSet&& set, Format to, const FormatWriteOptions& options = {},
                      const Consent& consent = {});
// PrepareForFormat, then the format's encoder (kUnsupported for formats
// that write files only).
Result<std::string> EncodeTensorSet(const TensorSet& set, Format to, const FormatWriteOptions& options = {},
                                    const Consent& consent = {});

// `error` (a failure to open `path` as `want`) explained: when the file is
// recognisably another format (its first bytes, or its extension when they
// do not decide), kUnsupported "x.safetensors is not a tsafe file: its
// format is safetensors; `tensorsafe convert x.safetensors x.tsafe`
// rewrites it", so a valid
// file of another kind is never reported as corrupt. Otherwise, and for OK,
// `error` itself. Callers that open one format (the updater commands,
// Python's tensorsafe.open) pass their errors through it.
Status ExplainFormatMismatch(const std::string& path, Format want, Status error);
template <typename T>
Result<T> ExplainFormatMismatch(const std::string& path, Format want, Result<T> result) {
  if (result.ok()) return result;
  return ExplainFormatMismatch(path, want, result.status());
}

// True when `dtype` can be written as `format` and read back as the same
// dtype (CONVERT.md §2).
bool FormatHoldsDType(Format format, DType dtype);

}  // namespace tensorsafe
