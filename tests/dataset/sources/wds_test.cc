// WebDataset tar shards: golden shards written by webdataset (tests/golden/
// wds/make.py) read sample for sample as webdataset decodes them, GNU and
// pax long names, and each tar and grouping check of docs/formats/wds.md
// with its code and message.
#include "tensorsafe/dataset/wds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "dataset/sources/wds/internal.h"
#include "formats/sample_json.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"

namespace tensorsafe {
namespace {

using dataset::FieldKind;
using testing::ReadFileBytes;

const std::string kWdsGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/wds/";

std::span<const std::byte> Span(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

Result<std::unique_ptr<dataset::ShardSource>> OpenBytes(const std::string& tar, wds::ReadOptions o = {}) {
  return wds::OpenShardBytes(Span(tar), nullptr, "t.tar", o);
}

TEST(WdsGolden, ShardsMatchWebdatasetsDecoder) {
  auto names = wds::ExpandBraces(kWdsGolden + "ds-{000000..000002}.tar");
  ASSERT_TRUE(names.ok());
  ASSERT_EQ(names->size(), 3u);
  auto expected = testing::ReadJsonLines(kWdsGolden + "expected.jsonl");
  ASSERT_EQ(expected.size(), 7u);
  std::size_t global = 0;
  std::vector<dataset::FieldView> views;
  for (const std::string& n : *names) {
    auto src = wds::OpenShard(n);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    for (std::uint64_t i = 0; i < (*src)->num_samples(); ++i, ++global) {
      ASSERT_TRUE((*src)->Read(i, views).ok());
      EXPECT_EQ(testing::SampleJson(views), expected[global]["fields"]) << "sample " << global;
    }
  }
  EXPECT_EQ(global, 7u);
}

TEST(WdsGolden, MembersMapToFields) {
  auto src = wds::OpenShard(kWdsGolden + "ds-000000.tar");
  ASSERT_TRUE(src.ok());
  const dataset::Schema& s = (*src)->schema();
  ASSERT_EQ(s.fields.size(), 9u);
  EXPECT_EQ(s.fields[0].name, "__key__");
  EXPECT_EQ(s.Find("bin")->kind, FieldKind::kBytes);
  EXPECT_EQ(s.Find("cls")->kind, FieldKind::kInt);
  EXPECT_EQ(s.Find("meta.json")->kind, FieldKind::kJson);
  EXPECT_EQ(s.Find("txt")->kind, FieldKind::kStr);
  EXPECT_EQ(s.Find("x.ten")->dtype, DType::kF32);
  EXPECT_EQ(s.Find("x.ten")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(s.Find("pair.ten[0]")->shape, (std::vector<std::int64_t>{dataset::kAnyDim}));
  EXPECT_EQ(s.Find("pair.ten[1]")->shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(s.Find("y.npy")->dtype, DType::kI16);
}

TEST(WdsGolden, GnuAndPaxLongNames) {
  for (const char* f : {"gnu.tar", "pax.tar"}) {
    auto src = wds::OpenShard(kWdsGolden + f);
    ASSERT_TRUE(src.ok()) << f << ": " << src.status().ToString();
    ASSERT_EQ((*src)->num_samples(), 2u);
    std::vector<dataset::FieldView> v;
    ASSERT_TRUE((*src)->Read(0, v).ok());
    nlohmann::json j = testing::SampleJson(v);
    EXPECT_EQ(j["__key__"]["text"], std::string(60, 'd') + "/" + std::string(80, 'k')) << f;
    EXPECT_EQ(j["cls"]["value"], 7);
    ASSERT_TRUE((*src)->Read(1, v).ok());
    EXPECT_EQ(testing::SampleJson(v)["cls"]["value"], 8);  // " 8\n", as Python's int() reads it
  }
}

// A ustar header block with a valid checksum.
std::string Header(const std::string& name, std::uint64_t size, char type = '0', const char* size_field = nullptr) {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<std::size_t>(name.size(), 100));
  std::memcpy(&h[100], "0000644", 7);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%011llo", static_cast<unsigned long long>(size));
  std::memcpy(&h[124], size_field ? size_field : buf, 11);
  std::memcpy(&h[136], "00000000000", 11);
  h[156] = type;
  std::memcpy(&h[257],
              "ustar\0"
              "00",
              8);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(buf, sizeof buf, "%06o", sum);
  std::memcpy(&h[148], buf, 7);
  return h;
}

std::string Member(const std::string& name, const std::string& data, char type = '0') {
  std::string m = Header(name, data.size(), type) + data;
  m.resize((m.size() + 511) / 512 * 512, '\0');
  return m;
}

std::string End() { return std::string(1024, '\0'); }

TEST(WdsTar, ChecksumMismatch) {
  std::string t = Member("a.txt", "x") + End();
  t[0] = 'b';
  EXPECT_STATUS(OpenBytes(t).status(), StatusCode::kCorruption, "t.tar: header at offset 0: checksum ");
}

TEST(WdsTar, SizesPastTheEnd) {
  std::string t = Header("a.bin", 0, '0', "77777777777") + End();
  EXPECT_STATUS(OpenBytes(t).status(), StatusCode::kCorruption,
                "member of 8589934591 bytes at 512 runs past the archive's 1536 bytes");
  t = Header("a.bin", 0, '0', "12x4       ") + End();
  EXPECT_STATUS(OpenBytes(t).status(), StatusCode::kCorruption, "size field is not octal");
}

TEST(WdsTar, EveryTruncationIsHandled) {
  const std::string whole = ReadFileBytes(kWdsGolden + "ds-000002.tar");
  for (std::size_t len = 0; len < whole.size(); len += 7) {
    auto src = OpenBytes(whole.substr(0, len));
    if (src.ok()) {
      EXPECT_LE((*src)->num_samples(), 1u);
    } else {
      EXPECT_EQ(src.status().code(), StatusCode::kCorruption) << len << ": " << src.status().ToString();
    }
  }
}

// A pax record "<len> key=value\n"; <len> counts its own digits.
std::string PaxRecord(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  std::size_t len = body.size() + 1;
  while (body.size() + std::to_string(len).size() != len) len = body.size() + std::to_string(len).size();
  return std::to_string(len) + body;
}

// Every header that is read as part of the header after it (tarfile's
// SubsequentHeaderError), followed by the end of the file or by a zero block.
TEST(WdsTar, ExtendedHeaderWithoutMemberIsCorruption) {
  const struct {
    std::string ext;
    const char* kind;
  } cases[] = {
      {Member("x", PaxRecord("mtime", "1700000000.5"), 'x'), "pax header"},  // as TarWriter writes them
      {Member("x", PaxRecord("path", "b.txt"), 'x'), "pax header"},
      {Member("x", PaxRecord("size", "3"), 'x'), "pax header"},
      {Member("g", PaxRecord("comment", "c"), 'g'), "pax global header"},
      {Member("././@LongLink", "b.txt", 'L'), "GNU long name"},
      {Member("././@LongLink", "target", 'K'), "GNU long link name"},
  };
  const std::string first = Member("a.txt", "x");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.kind);
    EXPECT_STATUS(OpenBytes(first + c.ext).status(), StatusCode::kCorruption,
                  std::string("t.tar: ") + c.kind + " at offset 1024 names no member: the archive ends at 2048 bytes");
    EXPECT_STATUS(
        OpenBytes(first + c.ext + End()).status(), StatusCode::kCorruption,
        std::string("t.tar: ") + c.kind + " at offset 1024 names no member: an all-zero block follows at offset 2048");
  }
  // Followed by its member, each reads.
  for (const auto& c : cases) {
    auto src = OpenBytes(first + c.ext + Member("b.txt", "y") + End());
    EXPECT_TRUE(src.ok()) << c.kind << ": " << src.status().ToString();
  }
}

TEST(WdsTar, PartialTrailingBlockIsCorruption) {
  const std::string first = Member("a.txt", "x");
  for (std::size_t cut : {1u, 100u, 511u}) {
    EXPECT_STATUS(OpenBytes(first + Header("b.txt", 1).substr(0, cut)).status(), StatusCode::kCorruption,
                  "t.tar: header at offset 1024 is cut short: " + std::to_string(cut) +
                      " of its 512 bytes before the end of the archive's " + std::to_string(1024 + cut) + " bytes");
  }
  // Inside the header a pax header names: the same message, at that header.
  const std::string pax = Member("x", PaxRecord("mtime", "1700000000.5"), 'x');
  EXPECT_STATUS(OpenBytes(first + pax + Header("b.txt", 1).substr(0, 300)).status(), StatusCode::kCorruption,
                "t.tar: header at offset 2048 is cut short: 300 of its 512 bytes before the end of the archive's "
                "2348 bytes");
  // Inside the next member's pax header (tarfile stops there silently).
  EXPECT_STATUS(OpenBytes(first + pax.substr(0, 200)).status(), StatusCode::kCorruption,
                "t.tar: header at offset 1024 is cut short: 200 of");
}

TEST(WdsTar, PaddingCutShortIsCorruption) {
  const std::string t = Member("a.txt", "hello") + Member("b.txt", std::string(600, 'b'));
  for (std::size_t len : {2136u, 2137u, 2559u}) {  // its data ends at 2136
    EXPECT_STATUS(OpenBytes(t.substr(0, len)).status(), StatusCode::kCorruption,
                  "t.tar: header at offset 1024: member of 600 bytes at 1536 is cut in its padding: the archive's " +
                      std::to_string(len) + " bytes end before the block boundary at 2560");
  }
  EXPECT_STATUS(OpenBytes(t.substr(0, 517)).status(), StatusCode::kCorruption,
                "member of 5 bytes at 512 is cut in its padding: the archive's 517 bytes end before the block "
                "boundary at 1024");
}

// What still reads: the end of the file on a block boundary, one or two zero
// blocks, an end marker cut inside (zero bytes only), tarfile's 10 KiB record
// padding, and anything after the first zero block.
TEST(WdsTar, WholeBlockEndsStillRead) {
  const std::string t = Member("a.txt", "x") + Member("a.cls", "1");
  std::string record = t + End();
  record.resize(10240, '\0');
  for (const std::string& s : {t, t + std::string(512, '\0'), t + End(), t + std::string(100, '\0'),
                               t + std::string(512 + 300, '\0'), record, t + End() + "trailing garbage"}) {
    auto src = OpenBytes(s);
    ASSERT_TRUE(src.ok()) << s.size() << ": " << src.status().ToString();
    EXPECT_EQ((*src)->num_samples(), 1u) << s.size();
  }
}

// A shard as webdataset's TarWriter writes it (a pax header before each
// member, for its float mtime; 10 KiB records), cut at every block boundary
// and at 1, 100 and 511 bytes past each: a cut refuses to read unless it
// falls where a member ends or inside the end marker, and a shard that reads
// holds a prefix of the whole shard's members and samples.
TEST(WdsTar, EveryTruncationOfAPaxShard) {
  std::string whole;
  std::vector<std::uint64_t> member_ends;
  for (int i = 0; i < 3; ++i) {
    const std::string key = "k" + std::to_string(i);
    using P = std::pair<std::string, std::string>;
    for (const auto& [suffix, data] : {P{"cls", std::to_string(i)}, P{"json", "{\"i\": " + std::to_string(i) + "}"}}) {
      whole += Member("././@PaxHeader", PaxRecord("mtime", "1700000000.25"), 'x');
      whole += Member(key + "." + suffix, data);
      member_ends.push_back(whole.size());
    }
  }
  const std::uint64_t data_end = whole.size();
  whole += End();
  whole.resize((whole.size() + 10239) / 10240 * 10240, '\0');  // tarfile's records

  auto full_members = wds::internal::ScanTar(Span(whole), "t.tar");
  ASSERT_TRUE(full_members.ok()) << full_members.status().ToString();
  ASSERT_EQ(full_members->size(), 6u);
  auto full = OpenBytes(whole);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ASSERT_EQ((*full)->num_samples(), 3u);
  std::vector<nlohmann::json> full_samples;
  std::vector<dataset::FieldView> v;
  for (std::uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE((*full)->Read(i, v).ok());
    full_samples.push_back(testing::SampleJson(v));
  }

  std::vector<std::uint64_t> cuts;
  for (std::uint64_t b = 0; b < whole.size(); b += 512) {
    for (std::uint64_t d : {0, 1, 100, 511}) cuts.push_back(b + d);
  }
  std::size_t accepted = 0;
  for (std::uint64_t cut : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(whole.size()));
    const std::string part = whole.substr(0, cut);
    const bool at_member_end =
        cut == 0 || cut >= data_end || std::find(member_ends.begin(), member_ends.end(), cut) != member_ends.end();
    auto members = wds::internal::ScanTar(Span(part), "t.tar");
    if (!at_member_end) {
      EXPECT_STATUS(members.status(), StatusCode::kCorruption, "t.tar: ");
      EXPECT_STATUS(OpenBytes(part).status(), StatusCode::kCorruption, "t.tar: ");
      continue;
    }
    ++accepted;
    ASSERT_TRUE(members.ok()) << members.status().ToString();
    const std::size_t k = std::count_if(member_ends.begin(), member_ends.end(), [&](auto e) { return e <= cut; });
    ASSERT_EQ(members->size(), k);
    for (std::size_t m = 0; m < k; ++m) {
      EXPECT_EQ((*members)[m].path, (*full_members)[m].path);
      EXPECT_EQ((*members)[m].offset, (*full_members)[m].offset);
      EXPECT_EQ((*members)[m].size, (*full_members)[m].size);
    }
    auto src = OpenBytes(part);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    ASSERT_EQ((*src)->num_samples(), (k + 1) / 2);
    for (std::uint64_t i = 0; i < (*src)->num_samples(); ++i) {
      Status st = (*src)->Read(i, v);
      if (k % 2 == 1 && i + 1 == (*src)->num_samples()) {
        // The cut split this sample: it lacks its .json. As the first sample
        // it fixes the schema; later, its fields differ from the shard's.
        if (i == 0) {
          ASSERT_TRUE(st.ok()) << st.ToString();
          nlohmann::json want = full_samples[0];
          want.erase("json");
          EXPECT_EQ(testing::SampleJson(v), want);
        } else {
          EXPECT_STATUS(st, StatusCode::kUnsupported, "fields {cls} differ from the shard's {cls, json}");
        }
      } else {
        ASSERT_TRUE(st.ok()) << st.ToString();
        EXPECT_EQ(testing::SampleJson(v), full_samples[i]) << "sample " << i;
      }
    }
  }
  // 0, the first 5 member ends, and the 16 blocks from the last member's end
  // (end marker and record padding) with their 3 cuts inside each: 70.
  EXPECT_EQ(accepted, 1u + 5 + (whole.size() - data_end) / 512 * 4);
}

TEST(WdsTar, UnsafePaths) {
  EXPECT_STATUS(OpenBytes(Member("../evil.txt", "x") + End()).status(), StatusCode::kCorruption,
                "unsafe member path \"../evil.txt\" (a .. component)");
  EXPECT_STATUS(OpenBytes(Member("/etc/x.txt", "x") + End()).status(), StatusCode::kCorruption,
                "unsafe member path \"/etc/x.txt\" (absolute)");
  EXPECT_STATUS(OpenBytes(Member("x", "22 path=a/../../b.txt\n", 'x') + Member("b.txt", "x") + End()).status(),
                StatusCode::kCorruption, "unsafe member path \"a/../../b.txt\"");
}

TEST(WdsTar, LongNamesAndPaxRecords) {
  std::string longname(300, 'n');
  // The shard views these bytes (no owner given): they must outlive it.
  const std::string tar = Member("././@LongLink", longname + ".txt", 'L') + Member("short.txt", "hi") + End();
  auto src = OpenBytes(tar);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::vector<dataset::FieldView> v;
  ASSERT_TRUE((*src)->Read(0, v).ok());
  EXPECT_EQ(testing::SampleJson(v)["__key__"]["text"], longname);
  wds::ReadOptions small;
  small.max_path_bytes = 100;
  EXPECT_STATUS(OpenBytes(Member("././@LongLink", longname, 'L') + Member("a.txt", "") + End(), small).status(),
                StatusCode::kLimitExceeded, "GNU long name of 300 bytes exceeds the limit 100");
  EXPECT_STATUS(OpenBytes(Member("x", "99 path=a.txt\n", 'x') + Member("b.txt", "x") + End()).status(),
                StatusCode::kCorruption, "pax record of 99 bytes overruns");
  EXPECT_STATUS(OpenBytes(Member("s", "", 'S') + End()).status(), StatusCode::kUnsupported, "GNU sparse member");
  EXPECT_STATUS(OpenBytes(Member("././@LongLink", "a.txt", 'L') + End()).status(), StatusCode::kCorruption,
                "names no member");
}

TEST(WdsTar, SkipsWhatWebdatasetSkips) {
  std::string t = Member("__meta__", "m") + Member("__dir__/a.txt", "m") + Member("README", "no dot") +
                  Member("d/", "", '5') + Member("link.txt", "", '2') + Member("a.txt", "A") + Member("a.CLS", "3") +
                  End();
  auto src = OpenBytes(t);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_EQ((*src)->num_samples(), 1u);
  std::vector<dataset::FieldView> v;
  ASSERT_TRUE((*src)->Read(0, v).ok());
  nlohmann::json j = testing::SampleJson(v);
  EXPECT_EQ(j["cls"]["value"], 3);  // suffix lower-cased
  EXPECT_EQ(j["txt"]["text"], "A");
}

TEST(WdsGrouping, DuplicateSuffixIsAnError) {
  EXPECT_STATUS(OpenBytes(Member("a.txt", "1") + Member("a.TXT", "2") + End()).status(), StatusCode::kCorruption,
                "member \"a.TXT\": duplicate suffix \"txt\" in sample \"a\"");
}

TEST(WdsGrouping, BadSamplesFailAloneOnRead) {
  std::string t = Member("a.cls", "1") + Member("a.txt", "x") + Member("b.cls", "1.5") + Member("b.txt", "y") +
                  Member("c.cls", "2") + Member("d.cls", "99999999999999999999") + Member("d.txt", "z") +
                  Member("e.cls", "4") + Member("e.txt", "\xff") + Member("f.cls", "5") + Member("f.txt", "ok") + End();
  auto src = OpenBytes(t);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_EQ((*src)->num_samples(), 6u);
  std::vector<dataset::FieldView> v;
  EXPECT_TRUE((*src)->Read(0, v).ok());
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kCorruption, "sample 1 (key \"b\"): member \"b.cls\": not an integer");
  EXPECT_STATUS((*src)->Read(2, v), StatusCode::kUnsupported, "fields {cls} differ from the shard's {cls, txt}");
  EXPECT_STATUS((*src)->Read(3, v), StatusCode::kCorruption, "integer outside int64");
  EXPECT_STATUS((*src)->Read(4, v), StatusCode::kCorruption, "text is not valid UTF-8");
  ASSERT_TRUE((*src)->Read(5, v).ok());
  EXPECT_EQ(testing::SampleJson(v)["cls"]["value"], 5);
  EXPECT_STATUS((*src)->Read(6, v), StatusCode::kOutOfRange, "sample 6 of 6");
}

TEST(WdsGrouping, SplitKeyFollowsBasePlusExt) {
  std::string_view k, s;
  ASSERT_TRUE(wds::internal::SplitKey("dir/sample00001.seg.png", &k, &s));
  EXPECT_EQ(k, "dir/sample00001");
  EXPECT_EQ(s, "seg.png");
  ASSERT_TRUE(wds::internal::SplitKey("a.b/c.d", &k, &s));
  EXPECT_EQ(k, "a.b/c");
  EXPECT_FALSE(wds::internal::SplitKey("noext", &k, &s));
  EXPECT_FALSE(wds::internal::SplitKey(".hidden", &k, &s));
  ASSERT_TRUE(wds::internal::SplitKey("dir/.x.y", &k, &s));  // the regex backtracks into the directory
  EXPECT_EQ(k, "dir/");
  EXPECT_EQ(s, "x.y");
  EXPECT_FALSE(wds::internal::SplitKey("a.b/.x", &k, &s));
  EXPECT_TRUE(wds::internal::IsMetaMember("__meta__"));
  EXPECT_TRUE(wds::internal::IsMetaMember("___"));
  EXPECT_TRUE(wds::internal::IsMetaMember("__x__/y.txt"));
  EXPECT_FALSE(wds::internal::IsMetaMember("__x/y.txt"));
  EXPECT_FALSE(wds::internal::IsMetaMember("a__b__"));
}

TEST(WdsBraces, Expand) {
  auto r = wds::ExpandBraces("ds-{000008..000011}.tar");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::string>{"ds-000008.tar", "ds-000009.tar", "ds-000010.tar", "ds-000011.tar"}));
  r = wds::ExpandBraces("{a,b}-{1..2}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::string>{"a-1", "a-2", "b-1", "b-2"}));
  EXPECT_EQ(*wds::ExpandBraces("plain.tar"), std::vector<std::string>{"plain.tar"});
  EXPECT_STATUS(wds::ExpandBraces("x{1..3").status(), StatusCode::kInvalidArgument, "unbalanced '{'");
  EXPECT_STATUS(wds::ExpandBraces("x{abc}").status(), StatusCode::kInvalidArgument,
                "neither a list nor a numeric range");
  EXPECT_STATUS(wds::ExpandBraces("{0..999999999}", 1000).status(), StatusCode::kLimitExceeded, "more than 1000");
}

}  // namespace
}  // namespace tensorsafe
