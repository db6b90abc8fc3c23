#include "formats/npy/zip.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "formats/npy/internal.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::internal::zip {
namespace {

using tensorsafe::internal::Str;

// APPNOTE 4.3.7, 4.3.12, 4.3.14, 4.3.15, 4.3.16.
constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50;
constexpr std::uint32_t kEndSig = 0x06054b50, kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr std::size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22, kEnd64Size = 56, kLocatorSize = 20;
constexpr std::uint16_t kZip64ExtraId = 0x0001;
constexpr std::uint16_t kVersion45 = 45;          // zip64 needs 4.5
constexpr std::uint16_t kMadeByUnix45 = 0x032d;   // host 3 (Unix), 4.5
constexpr std::uint16_t kDosDate1980 = 0x0021;    // 1980-01-01, the DOS epoch
constexpr std::uint32_t kMode0600 = 0600u << 16;  // Unix mode in the high half
constexpr std::uint16_t kFlagEncrypted = 0x0001, kFlagStrongEncryption = 0x0040, kFlagUtf8 = 0x0800;
// Python's zipfile switches to zip64 above 2^31 - 1 so readers that use
// signed 32-bit offsets keep working; we do the same (and match its bytes).
constexpr std::uint64_t kZip64Limit = (std::uint64_t{1} << 31) - 1;
constexpr std::uint64_t kCountLimit = 0xffff;

struct Cursor {
  const std::byte* p;
  std::uint16_t U16() {
    auto v = Load16(p);
    p += 2;
    return v;
  }
  std::uint32_t U32() {
    auto v = Load32(p);
    p += 4;
    return v;
  }
  std::uint64_t U64() {
    auto v = Load64(p);
    p += 8;
    return v;
  }
};

// Reads the zip64 extra field of a central entry: each 64-bit value is present
// only where the 32-bit field holds its all-ones escape (APPNOTE 4.5.3).
Status ApplyZip64Extra(std::span<const std::byte> extra, bool need_size, bool need_csize, bool need_offset, Entry* e) {
  std::size_t i = 0;
  while (i + 4 <= extra.size()) {
    const std::uint16_t id = Load16(extra.data() + i), len = Load16(extra.data() + i + 2);
    if (len > extra.size() - i - 4)
      return Corruption("extra field " + Str(id) + " of " + Str(len) + " bytes runs past the extra area");
    if (id == kZip64ExtraId) {
      const std::size_t want = 8 * (need_size + need_csize + need_offset);
      if (len < want) return Corruption("zip64 extra field of " + Str(len) + " bytes, " + Str(want) + " needed");
      Cursor c{extra.data() + i + 4};
      if (need_size) e->size = c.U64();
      if (need_csize) e->compressed_size = c.U64();
      if (need_offset) e->local_offset = c.U64();
      return Status::OK();
    }
    i += 4 + len;
  }
  if (need_size || need_csize || need_offset)
    return Corruption("a 32-bit field is 0xffffffff but there is no zip64 extra field");
  return Status::OK();
}

// The upper half of code page 437, as Unicode code points: APPNOTE 4.4.4
// reads a name without the UTF-8 flag (bit 11) as CP437, and so does
// Python's zipfile, whose keys np.load returns.
constexpr std::uint16_t kCp437High[128] = {
    0x00C7, 0x00FC, 0x00E9, 0x00E2, 0x00E4, 0x00E0, 0x00E5, 0x00E7, 0x00EA, 0x00EB, 0x00E8, 0x00EF, 0x00EE,
    0x00EC, 0x00C4, 0x00C5, 0x00C9, 0x00E6, 0x00C6, 0x00F4, 0x00F6, 0x00F2, 0x00FB, 0x00F9, 0x00FF, 0x00D6,
    0x00DC, 0x00A2, 0x00A3, 0x00A5, 0x20A7, 0x0192, 0x00E1, 0x00ED, 0x00F3, 0x00FA, 0x00F1, 0x00D1, 0x00AA,
    0x00BA, 0x00BF, 0x2310, 0x00AC, 0x00BD, 0x00BC, 0x00A1, 0x00AB, 0x00BB, 0x2591, 0x2592, 0x2593, 0x2502,
    0x2524, 0x2561, 0x2562, 0x2556, 0x2555, 0x2563, 0x2551, 0x2557, 0x255D, 0x255C, 0x255B, 0x2510, 0x2514,
    0x2534, 0x252C, 0x251C, 0x2500, 0x253C, 0x255E, 0x255F, 0x255A, 0x2554, 0x2569, 0x2566, 0x2560, 0x2550,
    0x256C, 0x2567, 0x2568, 0x2564, 0x2565, 0x2559, 0x2558, 0x2552, 0x2553, 0x256B, 0x256A, 0x2518, 0x250C,
    0x2588, 0x2584, 0x258C, 0x2590, 0x2580, 0x03B1, 0x00DF, 0x0393, 0x03C0, 0x03A3, 0x03C3, 0x00B5, 0x03C4,
    0x03A6, 0x0398, 0x03A9, 0x03B4, 0x221E, 0x03C6, 0x03B5, 0x2229, 0x2261, 0x00B1, 0x2265, 0x2264, 0x2320,
    0x2321, 0x00F7, 0x2248, 0x00B0, 0x2219, 0x00B7, 0x221A, 0x207F, 0x00B2, 0x25A0, 0x00A0,
};

std::string Cp437ToUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const std::uint32_t u = c < 0x80 ? c : kCp437High[c - 0x80];
    if (u < 0x80) {
      out += static_cast<char>(u);
    } else if (u < 0x800) {
      out += static_cast<char>(0xC0 | (u >> 6));
      out += static_cast<char>(0x80 | (u & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (u >> 12));
      out += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (u & 0x3F));
    }
  }
  return out;
}

}  // namespace

std::uint32_t Crc32(std::uint32_t crc, std::span<const std::byte> bytes) {
  return static_cast<std::uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

Result<std::vector<Entry>> ReadDirectory(std::span<const std::byte> file, const std::string& where,
                                         std::uint64_t max_entries) {
  auto err = [&](Status s) { return s.WithContext(where); };
  const std::uint64_t size = file.size();
  if (size < kEndSize) return err(Corruption("file is " + Str(size) + " bytes, smaller than a 22-byte zip end record"));
  // The end record sits at the end, followed only by its comment (<= 65535).
  std::uint64_t end = size - kEndSize;
  const std::uint64_t lowest = size >= kEndSize + 0xffff ? size - kEndSize - 0xffff : 0;
  for (;;) {
    if (Load32(file.data() + end) == kEndSig && Load16(file.data() + end + 20) == size - end - kEndSize) break;
    if (end == lowest) return err(Corruption("no zip end-of-central-directory record: not a zip file"));
    --end;
  }
  Cursor c{file.data() + end + 4};
  const std::uint16_t disk = c.U16(), cd_disk = c.U16();
  std::uint64_t count_disk = c.U16(), count = c.U16();
  std::uint64_t cd_size = c.U32(), cd_offset = c.U32();
  std::uint64_t cd_limit = end;  // the directory ends before the end records
  if (end >= kLocatorSize && Load32(file.data() + end - kLocatorSize) == kLocator64Sig) {
    Cursor l{file.data() + end - kLocatorSize + 4};
    const std::uint32_t l_disk = l.U32();
    const std::uint64_t rec = l.U64();
    const std::uint32_t disks = l.U32();
    if (l_disk != 0 || disks > 1) return err(Unsupported("multi-disk (spanned) zip archives are not supported"));
    if (!RangeWithin(rec, kEnd64Size, end - kLocatorSize) || Load32(file.data() + rec) != kEnd64Sig) {
      return err(Corruption("zip64 locator points at offset " + Str(rec) + ", where there is no zip64 end record"));
    }
    Cursor r{file.data() + rec + 4 + 8 + 2 + 2};
    const std::uint32_t d64 = r.U32(), cd64 = r.U32();
    if (d64 != 0 || cd64 != 0) return err(Unsupported("multi-disk (spanned) zip archives are not supported"));
    count_disk = r.U64();
    count = r.U64();
    cd_size = r.U64();
    cd_offset = r.U64();
    cd_limit = rec;
  } else if (disk != 0 || cd_disk != 0) {
    return err(Unsupported("multi-disk (spanned) zip archives are not supported"));
  }
  // Single disk (checked above): both counts are the whole directory's.
  if (count != count_disk) {
    return err(Corruption("end record counts " + Str(count_disk) + " entries on this disk but " + Str(count) +
                          " in all, in a single-disk archive"));
  }
  if (count > max_entries) {
    return err(LimitExceeded("zip has " + Str(count) + " entries, more than the limit of " + Str(max_entries)));
  }
  if (!RangeWithin(cd_offset, cd_size, cd_limit)) {
    return err(Corruption("central directory at offset " + Str(cd_offset) + " + size " + Str(cd_size) +
                          " runs past its end records at " + Str(cd_limit)));
  }
  if (count > cd_size / kCentralSize) {
    return err(Corruption(Str(count) + " entries cannot fit in a central directory of " + Str(cd_size) + " bytes"));
  }
  std::vector<Entry> entries;
  entries.reserve(count);
  std::uint64_t pos = cd_offset;
  const std::uint64_t cd_end = cd_offset + cd_size;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string label = "central entry " + Str(i);
    if (cd_end - pos < kCentralSize || Load32(file.data() + pos) != kCentralSig) {
      return err(Corruption(label + " at offset " + Str(pos) + ": bad signature or past the directory end"));
    }
    Cursor h{file.data() + pos + 8};
    Entry e;
    e.flags = h.U16();
    e.method = h.U16();
    h.U32();  // DOS time and date: not used
    e.crc = h.U32();
    e.compressed_size = h.U32();
    e.size = h.U32();
    const std::uint16_t nlen = h.U16(), xlen = h.U16(), clen = h.U16(), start_disk = h.U16();
    h.U16();
    h.U32();  // internal and external attributes
    e.local_offset = h.U32();
    const std::uint64_t var = std::uint64_t{nlen} + xlen + clen;
    if (var > cd_end - pos - kCentralSize) {
      return err(Corruption(label + ": name, extra and comment (" + Str(var) + " bytes) run past the directory end"));
    }
    e.name.assign(reinterpret_cast<const char*>(file.data() + pos + kCentralSize), nlen);
    Status s = ApplyZip64Extra(file.subspan(pos + kCentralSize + nlen, xlen), e.size == 0xffffffff,
                               e.compressed_size == 0xffffffff, e.local_offset == 0xffffffff, &e);
    const std::string named = label + " " + QuoteName(e.name);
    if (!s.ok()) return err(s.WithContext(named));
    if (start_disk != 0 && start_disk != 0xffff) return err(Unsupported(named + ": on disk " + Str(start_disk)));
    if (e.flags & (kFlagEncrypted | kFlagStrongEncryption))
      return err(Unsupported(named + ": encrypted members are not supported"));
    if (e.method != kStored && e.method != kDeflated) {
      return err(
          Unsupported(named + ": compression method " + Str(e.method) + " (only stored and deflated are supported)"));
    }
    // The local header repeats the name; its extra may differ in length.
    if (!RangeWithin(e.local_offset, kLocalSize, cd_offset) || Load32(file.data() + e.local_offset) != kLocalSig) {
      return err(Corruption(named + ": no local header at offset " + Str(e.local_offset)));
    }
    Cursor lh{file.data() + e.local_offset + 26};
    const std::uint16_t lnlen = lh.U16(), lxlen = lh.U16();
    e.data_offset = e.local_offset + kLocalSize + lnlen + lxlen;
    if (!RangeWithin(e.local_offset + kLocalSize, std::uint64_t{lnlen} + lxlen, cd_offset) ||
        std::string_view(reinterpret_cast<const char*>(file.data() + e.local_offset + kLocalSize), lnlen) != e.name) {
      return err(Corruption(named + ": local header name differs from the central directory"));
    }
    if (!(e.flags & kFlagUtf8)) {
      if (!IsAscii(e.name)) e.name = Cp437ToUtf8(e.name);
    } else if (!IsValidUtf8(e.name)) {
      return err(Corruption(named + ": name flagged as UTF-8 (bit 11) is not valid UTF-8"));
    }
    if (!RangeWithin(e.data_offset, e.compressed_size, cd_offset)) {
      return err(Corruption(named + ": data at offset " + Str(e.data_offset) + " + " + Str(e.compressed_size) +
                            " bytes runs into the central directory at " + Str(cd_offset)));
    }
    if (e.method == kStored && e.compressed_size != e.size) {
      return err(Corruption(named + ": stored member with compressed size " + Str(e.compressed_size) + " != size " +
                            Str(e.size)));
    }
    entries.push_back(std::move(e));
    pos += kCentralSize + var;
  }
  // Overlapping members are how zip bombs multiply one compressed stream.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->local_offset < b->local_offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& a = *by_offset[i - 1];
    if (a.data_offset + a.compressed_size > by_offset[i]->local_offset) {
      return err(Corruption("members " + QuoteName(a.name) + " and " + QuoteName(by_offset[i]->name) + " overlap"));
    }
  }
  return entries;
}

// The most bytes one byte of deflate data can inflate to.
constexpr std::uint64_t kMaxDeflateRatio = 1032;

Result<std::span<const std::byte>> Extract(std::span<const std::byte> file, const Entry& e, bool verify_crc,
                                           std::shared_ptr<std::byte>* buffer, const std::string& where) {
  std::span<const std::byte> src = file.subspan(e.data_offset, e.compressed_size);
  std::span<const std::byte> out = src;
  if (e.method == kDeflated) {
    // Deflate expands at most 1032:1 (a 258-byte match coded in two bits), so
    // a larger declared size is a lie; refuse it before allocating it.
    if (e.size / kMaxDeflateRatio > e.compressed_size) {
      return Corruption(where + ": declares " + Str(e.size) + " inflated bytes, more than deflate can produce from " +
                        Str(e.compressed_size) + " compressed bytes (at most " + Str(kMaxDeflateRatio) + " per byte)");
    }
    *buffer = AllocAligned(e.size);
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Internal(where + ": inflateInit2 failed");
    std::uint64_t in_left = src.size(), out_left = e.size;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(src.data()));
    z.next_out = reinterpret_cast<Bytef*>(buffer->get());
    // avail_in/avail_out are 32-bit: members over 4 GiB are fed in slices.
    constexpr std::uint64_t kSlice = std::uint64_t{1} << 30;
    int rc;
    for (;;) {
      if (z.avail_in == 0 && in_left > 0) {
        z.avail_in = static_cast<uInt>(std::min(in_left, kSlice));
        in_left -= z.avail_in;
      }
      if (z.avail_out == 0 && out_left > 0) {
        z.avail_out = static_cast<uInt>(std::min(out_left, kSlice));
        out_left -= z.avail_out;
      }
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_STREAM_END || (rc != Z_OK && rc != Z_BUF_ERROR)) break;
      // Z_BUF_ERROR: no progress possible; continue only if a slice is left.
      if (rc == Z_BUF_ERROR && !(z.avail_in == 0 && in_left > 0) && !(z.avail_out == 0 && out_left > 0)) break;
    }
    const std::uint64_t in_rest = in_left + z.avail_in, out_rest = out_left + z.avail_out;
    const std::string zmsg = z.msg ? z.msg : "zlib error " + Str(static_cast<std::uint64_t>(-rc));
    inflateEnd(&z);
    if (rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_NEED_DICT) {
      return Corruption(where + ": invalid deflate data: " + zmsg);
    }
    if (rc != Z_STREAM_END) {
      return Corruption(where + (out_rest == 0 ? ": inflates to more than the declared " + Str(e.size) + " bytes"
                                               : ": deflate stream ends early, after " + Str(e.size - out_rest) +
                                                     " of " + Str(e.size) + " bytes"));
    }
    if (out_rest != 0) {
      return Corruption(where + ": inflated to " + Str(e.size - out_rest) + " bytes, the directory says " +
                        Str(e.size));
    }
    if (in_rest != 0) {
      return Corruption(where + ": " + Str(in_rest) + " bytes after the end of the deflate stream");
    }
    out = {buffer->get(), static_cast<std::size_t>(e.size)};
  }
  if (verify_crc) {
    const std::uint32_t got = Crc32(0, out);
    if (got != e.crc) {
      return Corruption(where + ": CRC-32 mismatch: stored " + Str(e.crc) + ", computed " + Str(got));
    }
  }
  return out;
}

namespace {

void PutLocal(std::string& s, const Entry& e) {
  Put32(s, kLocalSig);
  Put16(s, kVersion45);
  Put16(s, e.flags);
  Put16(s, e.method);
  Put16(s, 0);
  Put16(s, kDosDate1980);
  Put32(s, e.crc);
  Put32(s, 0xffffffff);  // sizes live in the zip64 extra
  Put32(s, 0xffffffff);
  Put16(s, static_cast<std::uint16_t>(e.name.size()));
  Put16(s, 20);
  s += e.name;
  Put16(s, kZip64ExtraId);
  Put16(s, 16);
  Put64(s, e.size);
  Put64(s, e.compressed_size);
}

}  // namespace

Status Writer::Add(const std::string& name, std::span<const std::span<const std::byte>> pieces, std::uint16_t method,
                   int level) {
  if (name.empty() || name.size() > 0xffff) {
    return InvalidArgument("zip member name of " + Str(name.size()) + " bytes (1..65535 allowed)");
  }
  Entry e;
  e.name = name;
  e.method = method;
  e.flags = IsAscii(name) ? 0 : kFlagUtf8;
  e.local_offset = file_.position();
  std::string head;
  if (method == kStored) {
    for (auto p : pieces) {
      e.crc = Crc32(e.crc, p);
      e.size += p.size();
    }
    e.compressed_size = e.size;
    PutLocal(head, e);
    TS_RETURN_IF_ERROR(file_.Append(std::as_bytes(std::span(head))));
    for (auto p : pieces) TS_RETURN_IF_ERROR(file_.Append(p));
  } else if (method == kDeflated) {
    if (!file_.seekable()) return FailedPrecondition(file_.name() + ": deflated zip members need a seekable file");
    PutLocal(head, e);  // patched below once crc and sizes are known
    TS_RETURN_IF_ERROR(file_.Append(std::as_bytes(std::span(head))));
    z_stream z{};
    // Raw deflate, memLevel 8: the parameters Python's zipfile uses.
    if (deflateInit2(&z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      return InvalidArgument("bad zlib level " + std::to_string(level));
    }
    std::vector<Bytef> out(1 << 16);
    Status s;
    auto pump = [&](const std::byte* p, std::size_t n, int flush) -> int {
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(p));
      z.avail_in = static_cast<uInt>(n);
      int rc;
      do {
        z.next_out = out.data();
        z.avail_out = static_cast<uInt>(out.size());
        rc = deflate(&z, flush);
        const std::size_t k = out.size() - z.avail_out;
        if (k && s.ok()) s = file_.Append(std::as_bytes(std::span(out.data(), k)));
        e.compressed_size += k;
      } while (s.ok() && (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END)) && rc != Z_STREAM_ERROR);
      return rc;
    };
    for (auto p : pieces) {
      e.crc = Crc32(e.crc, p);
      e.size += p.size();
      for (std::size_t off = 0; off < p.size() && s.ok();) {
        const std::size_t n = std::min<std::size_t>(p.size() - off, std::size_t{1} << 30);
        pump(p.data() + off, n, Z_NO_FLUSH);
        off += n;
      }
    }
    const int rc = s.ok() ? pump(nullptr, 0, Z_FINISH) : Z_OK;
    deflateEnd(&z);
    TS_RETURN_IF_ERROR(s);
    if (rc != Z_STREAM_END) return Internal("deflate did not finish: zlib code " + std::to_string(rc));
    TS_RETURN_IF_ERROR(Patch(e));
  } else {
    return InvalidArgument("zip method " + Str(method));
  }
  entries_.push_back(std::move(e));
  return Status::OK();
}

Status Writer::Patch(const Entry& e) {
  std::string head;
  PutLocal(head, e);
  return file_.WriteAt(e.local_offset, std::as_bytes(std::span(head)));
}

Status Writer::Finish() {
  std::string cd;
  const std::uint64_t cd_offset = file_.position();
  for (const Entry& e : entries_) {
    std::string extra;
    const bool big_sizes = force_zip64_ || e.size > kZip64Limit || e.compressed_size > kZip64Limit;
    const bool big_offset = force_zip64_ || e.local_offset > kZip64Limit;
    if (big_sizes) {
      Put64(extra, e.size);
      Put64(extra, e.compressed_size);
    }
    if (big_offset) Put64(extra, e.local_offset);
    if (!extra.empty()) {
      std::string h;
      Put16(h, kZip64ExtraId);
      Put16(h, static_cast<std::uint16_t>(extra.size()));
      extra = h + extra;
    }
    Put32(cd, kCentralSig);
    Put16(cd, kMadeByUnix45);
    Put16(cd, kVersion45);
    Put16(cd, e.flags);
    Put16(cd, e.method);
    Put16(cd, 0);
    Put16(cd, kDosDate1980);
    Put32(cd, e.crc);
    Put32(cd, big_sizes ? 0xffffffff : static_cast<std::uint32_t>(e.compressed_size));
    Put32(cd, big_sizes ? 0xffffffff : static_cast<std::uint32_t>(e.size));
    Put16(cd, static_cast<std::uint16_t>(e.name.size()));
    Put16(cd, static_cast<std::uint16_t>(extra.size()));
    Put16(cd, 0);  // comment
    Put16(cd, 0);  // disk
    Put16(cd, 0);  // internal attributes
    Put32(cd, kMode0600);
    Put32(cd, big_offset ? 0xffffffff : static_cast<std::uint32_t>(e.local_offset));
    cd += e.name;
    cd += extra;
  }
  const std::uint64_t count = entries_.size(), cd_size = cd.size();
  if (force_zip64_ || count > kCountLimit || cd_size > kZip64Limit || cd_offset > kZip64Limit) {
    const std::uint64_t rec = cd_offset + cd_size;
    Put32(cd, kEnd64Sig);
    Put64(cd, kEnd64Size - 12);  // size of the rest of the record
    Put16(cd, kVersion45);
    Put16(cd, kVersion45);
    Put32(cd, 0);
    Put32(cd, 0);
    Put64(cd, count);
    Put64(cd, count);
    Put64(cd, cd_size);
    Put64(cd, cd_offset);
    Put32(cd, kLocator64Sig);
    Put32(cd, 0);
    Put64(cd, rec);
    Put32(cd, 1);
  }
  Put32(cd, kEndSig);
  Put16(cd, 0);
  Put16(cd, 0);
  Put16(cd, static_cast<std::uint16_t>(std::min(count, kCountLimit)));
  Put16(cd, static_cast<std::uint16_t>(std::min(count, kCountLimit)));
  Put32(cd, static_cast<std::uint32_t>(std::min<std::uint64_t>(cd_size, 0xffffffff)));
  Put32(cd, static_cast<std::uint32_t>(std::min<std::uint64_t>(cd_offset, 0xffffffff)));
  Put16(cd, 0);
  return file_.Append(std::as_bytes(std::span(cd)));
}

}  // namespace tensorsafe::internal::zip
