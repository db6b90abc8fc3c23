// Typed GGUF key/value edits (gguf_kv.h): KEY=TYPE:VALUE parsing, its
// errors, and edits that the writer then encodes with the given types.
#include <gtest/gtest.h>

#include "formats/codec_test_util.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_kv.h"

namespace tensorsafe::testing {
namespace {

TEST(GgufKvEdit, ParsesTypedValues) {
  struct Case {
    const char* arg;
    const char* key;
    const char* type;
    const char* value;
  };
  const Case cases[] = {
      {"general.name=str:foo bar", "general.name", "string", R"("foo bar")"},
      {"general.name=string:a=b:c", "general.name", "string", R"("a=b:c")"},
      {"general.alignment=u32:64", "general.alignment", "uint32", "64"},
      {"x=i8:-128", "x", "int8", "-128"},
      {"x=uint64:18446744073709551615", "x", "uint64", "18446744073709551615"},
      {"x=i64:-9223372036854775808", "x", "int64", "-9223372036854775808"},
      {"x=f32:0.5", "x", "float32", "0.5"},
      {"x=f64:-inf", "x", "float64", R"("-inf")"},
      {"x=bool:true", "x", "bool", "true"},
      {"x=bool:0", "x", "bool", "false"},
      {R"(x=str[]:["a","b"])", "x", "array<string>", R"(["a","b"])"},
      {"x=array<i32>:[1,-2]", "x", "array<int32>", "[1,-2]"},
      {"x=str:", "x", "string", R"("")"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.arg);
    auto e = gguf::ParseKeyValueEdit(c.arg);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->key, c.key);
    EXPECT_EQ(e->type, c.type);
    EXPECT_EQ(e->value_json, c.value);
  }
}

TEST(GgufKvEdit, RefusesWhatCannotBeWritten) {
  const std::pair<const char*, const char*> cases[] = {
      {"general.name", "\"general.name\": expected KEY=TYPE:VALUE"},
      {"=str:x", "\"=str:x\": the key is empty"},
      {"general.name=foo", "a type is needed: str, u32, f32, bool, str[], ..."},
      {"x=u9:1", "\"x=u9:1\": unknown type \"u9\""},
      {"x=u8:256", "256 is out of range for uint8"},
      {"x=i8:-129", "-129 is out of range for int8"},
      {"x=u32:-1", "-1 is out of range for uint32"},
      {"x=u32:1.5", "\"1.5\" is not a uint32"},
      {"x=u64:18446744073709551616", "is not a uint64"},
      {"x=f32:abc", "\"abc\" is not a number (nor nan, inf, -inf)"},
      {"x=f32:1e39", "1e+39 is out of range for float32"},
      {"x=bool:yes", "a bool is true, false, 1 or 0, not \"yes\""},
      {"x=str[]:a,b", "an array value is a JSON array"},
      {"x=u8[]:[1,300]", "300 is out of range for uint8"},
      {"tensorsafe.gguf_types=str:x", "the key is reserved for the GGUF types of the other keys"},
  };
  for (const auto& [arg, msg] : cases) {
    SCOPED_TRACE(arg);
    EXPECT_STATUS(gguf::ParseKeyValueEdit(arg), StatusCode::kInvalidArgument, msg);
  }
}

TEST(GgufKvEdit, EditsKeepTheOrderAndTheTypesTheWriterUses) {
  const std::string md =
      R"({"general.architecture":"llama","general.alignment":64,"n":3,"tensorsafe.gguf_types":{"general.architecture":"string","general.alignment":"uint32","n":"uint16"}})";
  std::vector<gguf::KeyValueEdit> set = {*gguf::ParseKeyValueEdit("n=u8:7"), *gguf::ParseKeyValueEdit("new=f32:1.5")};
  std::vector<std::string> del = {"general.architecture"};
  auto out = gguf::EditKeyValues(md, set, del);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(
      *out,
      R"({"general.alignment":64,"n":7,"new":1.5,"tensorsafe.gguf_types":{"general.alignment":"uint32","n":"uint8","new":"float32"}})");
  // The writer encodes them with those types; the reader gives back the same JSON.
  TensorSet s;
  s.metadata_json = *out;
  auto bytes = gguf::Encode(s);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto back = gguf::Decode(Bytes(*bytes), nullptr, "x.gguf");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->metadata_json, *out);
  // Metadata without types (from another format): only the edited key is typed.
  auto plain =
      gguf::EditKeyValues(R"({"a":"b"})", std::vector{*gguf::ParseKeyValueEdit("general.architecture=str:llama")});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain,
            R"({"a":"b","general.architecture":"llama","tensorsafe.gguf_types":{"general.architecture":"string"}})");
  // Deleting the last key leaves no metadata.
  auto none = gguf::EditKeyValues(R"({"a":"b"})", {}, std::vector<std::string>{"a"});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
}

TEST(GgufKvEdit, EditErrors) {
  EXPECT_STATUS(gguf::EditKeyValues(R"({"a":"b"})", {}, std::vector<std::string>{"c"}), StatusCode::kNotFound,
                "no key \"c\"");
  EXPECT_STATUS(gguf::EditKeyValues("[1]", {}), StatusCode::kInvalidArgument, "the metadata is not a JSON object");
  // The writer's own rules are checked as the value is parsed.
  EXPECT_STATUS(gguf::ParseKeyValueEdit("general.alignment=u32:48"), StatusCode::kInvalidArgument,
                "general.alignment 48 is not a power of two");
  EXPECT_STATUS(gguf::ParseKeyValueEdit("general.alignment=u16:64"), StatusCode::kInvalidArgument,
                "general.alignment must have type uint32");
  // An edit whose value is not JSON (made by hand, not parsed).
  const gguf::KeyValueEdit bad{"k", "string", "not json"};
  EXPECT_STATUS(gguf::EditKeyValues("", std::vector{bad}), StatusCode::kInvalidArgument,
                "key \"k\": the value is not JSON");
}

}  // namespace
}  // namespace tensorsafe::testing
