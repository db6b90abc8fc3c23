// The restricted unpickler (pickle.h). One opcode at a time, each checked
// before it acts: its operands fit in the buffer, the stack holds what it
// pops, its target is of the kind it applies to. The opcode table is
// docs/formats/pytorch.md "Opcodes"; semantics follow CPython's
// Lib/pickle.py (_Unpickler.load_*) for the data opcodes.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/pytorch/pickle.h"
#include "formats/pytorch/unpickler_run.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::pytorch::internal {
namespace {

using tensorsafe::internal::CheckedAdd;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::IsValidUtf8;
using tensorsafe::internal::Load16;
using tensorsafe::internal::Load32;
using tensorsafe::internal::Load64;
using tensorsafe::internal::QuoteName;

// Integers wider than this (LONG1/LONG4) are refused: state dicts hold
// counts and sizes, and converting a wider one to decimal text costs
// quadratic time in its length.
constexpr std::size_t kMaxIntBytes = 64;

struct OpInfo {
  std::uint8_t code;
  std::string_view name;
};
// Every opcode of protocols 0-5 (pickletools), for messages.
constexpr OpInfo kOpNames[] = {
    {'(', "MARK"},
    {'.', "STOP"},
    {'0', "POP"},
    {'1', "POP_MARK"},
    {'2', "DUP"},
    {'F', "FLOAT"},
    {'I', "INT"},
    {'J', "BININT"},
    {'K', "BININT1"},
    {'L', "LONG"},
    {'M', "BININT2"},
    {'N', "NONE"},
    {'P', "PERSID"},
    {'Q', "BINPERSID"},
    {'R', "REDUCE"},
    {'S', "STRING"},
    {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"},
    {'X', "BINUNICODE"},
    {'a', "APPEND"},
    {'b', "BUILD"},
    {'c', "GLOBAL"},
    {'d', "DICT"},
    {'}', "EMPTY_DICT"},
    {'e', "APPENDS"},
    {'g', "GET"},
    {'h', "BINGET"},
    {'i', "INST"},
    {'j', "LONG_BINGET"},
    {'l', "LIST"},
    {']', "EMPTY_LIST"},
    {'o', "OBJ"},
    {'p', "PUT"},
    {'q', "BINPUT"},
    {'r', "LONG_BINPUT"},
    {'s', "SETITEM"},
    {'t', "TUPLE"},
    {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"},
    {'G', "BINFLOAT"},
    {0x80, "PROTO"},
    {0x81, "NEWOBJ"},
    {0x82, "EXT1"},
    {0x83, "EXT2"},
    {0x84, "EXT4"},
    {0x85, "TUPLE1"},
    {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},
    {0x8a, "LONG1"},
    {0x8b, "LONG4"},
    {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"},
    {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},
    {0x95, "FRAME"},
    {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};

// Why an opcode that exists is refused.
std::string_view RefusedWhy(std::uint8_t op) {
  switch (op) {
    case 'i':
    case 'o':
    case 0x92: return "it instantiates a class";
    case 0x82:
    case 0x83:
    case 0x84: return "it looks up the copyreg extension registry";
    case 'P': return "text persistent ids are not written by torch.save";
    case 0x97:
    case 0x98: return "out-of-band buffers are not written by torch.save";
    case 0x91: return "frozensets are not written by torch.save";
    default: return "protocol 0 text opcodes are not written by torch.save (protocol 2 and up)";
  }
}

// Canonical text of a hashable key, equal for keys Python's dict treats as
// one (1, 1.0 and True; equal strings), so SETITEM replaces as dict does.
std::optional<std::string> CanonicalKey(const Value& v, int depth = 0) {
  if (depth > 64) return std::nullopt;
  switch (v.kind) {
    case Kind::kNone: return std::string("N");
    case Kind::kBool:
    case Kind::kInt: return "I" + std::to_string(v.i);
    case Kind::kBigInt: return "L" + v.s;
    case Kind::kFloat: {
      if (std::trunc(v.re) == v.re && std::fabs(v.re) < 9.2e18) {
        return "I" + std::to_string(static_cast<std::int64_t>(v.re));
      }
      return "F" + std::to_string(std::bit_cast<std::uint64_t>(v.re));
    }
    case Kind::kComplex: {
      if (v.im == 0) {
        Value re;
        re.kind = Kind::kFloat;
        re.re = v.re;
        return CanonicalKey(re, depth + 1);
      }
      return "C" + std::to_string(std::bit_cast<std::uint64_t>(v.re)) + "," +
             std::to_string(std::bit_cast<std::uint64_t>(v.im));
    }
    case Kind::kStr: return "S" + v.s;
    case Kind::kBytes: return "B" + v.s;
    case Kind::kTuple: {
      std::string k = "T" + std::to_string(v.items.size());
      for (const Value* item : v.items) {
        auto ik = CanonicalKey(*item, depth + 1);
        if (!ik) return std::nullopt;
        k += ":" + std::to_string(ik->size()) + ":" + *ik;
      }
      return k;
    }
    case Kind::kGlobal: return "G" + std::to_string(static_cast<int>(v.g.kind)) + "," + std::to_string(v.g.arg);
    case Kind::kStorage: return "P" + std::to_string(v.i);
    case Kind::kTensor: return "X" + std::to_string(reinterpret_cast<std::uintptr_t>(&v));
    case Kind::kObject: return "O" + std::to_string(reinterpret_cast<std::uintptr_t>(&v));
    case Kind::kList:
    case Kind::kDict:
    case Kind::kSet: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::string OpLabel(std::uint8_t op) {
  static const char* kHex = "0123456789abcdef";
  std::string hex = "0x";
  hex += kHex[op >> 4];
  hex += kHex[op & 15];
  const std::string_view name = OpcodeName(op);
  return name.empty() ? "byte " + hex + " (no opcode)" : std::string(name) + " (" + hex + ")";
}

bool IsStrLike(const Value* v) { return v->kind == Kind::kStr || v->kind == Kind::kBytes; }

std::string BigIntText(std::string_view le) {
  // Magnitude of a two's complement number, then repeated division by 10.
  std::vector<std::uint8_t> mag(le.begin(), le.end());
  const bool negative = !mag.empty() && (mag.back() & 0x80);
  if (negative) {
    unsigned carry = 1;
    for (auto& b : mag) {
      const unsigned v = static_cast<std::uint8_t>(~b) + carry;
      b = static_cast<std::uint8_t>(v);
      carry = v >> 8;
    }
  }
  std::string digits;
  for (;;) {
    bool zero = true;
    unsigned rem = 0;
    for (std::size_t i = mag.size(); i-- > 0;) {
      const unsigned cur = (rem << 8) | mag[i];
      mag[i] = static_cast<std::uint8_t>(cur / 10);
      rem = cur % 10;
      zero = zero && mag[i] == 0;
    }
    digits += static_cast<char>('0' + rem);
    if (zero) break;
  }
  if (negative) digits += '-';
  return std::string(digits.rbegin(), digits.rend());
}

std::string_view OpcodeName(std::uint8_t op) {
  for (const OpInfo& o : kOpNames) {
    if (o.code == op) return o.name;
  }
  return {};
}

std::string_view KindText(const Value& v) {
  switch (v.kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "a bool";
    case Kind::kInt:
    case Kind::kBigInt: return "an int";
    case Kind::kFloat: return "a float";
    case Kind::kComplex: return "a complex";
    case Kind::kStr: return "a str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "a tuple";
    case Kind::kList: return "a list";
    case Kind::kDict: return "a dict";
    case Kind::kSet: return "a set";
    case Kind::kGlobal: return "a global";
    case Kind::kStorage: return "a storage";
    case Kind::kTensor: return "a tensor";
    case Kind::kObject: return "an object";
  }
  return "a value";
}

std::optional<std::string> KeyText(const Value& key) {
  switch (key.kind) {
    case Kind::kStr: return key.s;
    case Kind::kInt: return std::to_string(key.i);
    case Kind::kBool: return std::string(key.i ? "True" : "False");
    case Kind::kNone: return std::string("None");
    case Kind::kBigInt: return BigIntText(key.s);
    default: return std::nullopt;
  }
}

Result<Value*> Unpickler::New(Kind kind) {
  if (arena_.size() >= limits_.max_values) {
    return LimitExceeded(where_ + ": the pickle makes more than " + Str(limits_.max_values) +
                         " values (Limits::max_values)");
  }
  Value& v = arena_.emplace_back();
  v.kind = kind;
  return &v;
}

// One pickle.load(): its stack, marks and memo.

// Two's complement little-endian, as pickle's decode_long.
Result<Value*> Unpickler::Run::MakeLong(std::string_view raw) {
  if (raw.size() > kMaxIntBytes) {
    return Refuse("an integer of " + Str(raw.size()) + " bytes (more than " + Str(kMaxIntBytes) + " are refused)");
  }
  std::size_t n = raw.size();
  const bool negative = n > 0 && (static_cast<unsigned char>(raw[n - 1]) & 0x80);
  // Drop redundant sign bytes, so a value that fits 8 bytes is a kInt.
  const unsigned char fill = negative ? 0xff : 0x00;
  while (n > 1 && static_cast<unsigned char>(raw[n - 1]) == fill &&
         ((static_cast<unsigned char>(raw[n - 2]) & 0x80) == (fill & 0x80))) {
    --n;
  }
  if (n <= 8) {
    std::uint64_t u = negative ? ~std::uint64_t{0} : 0;
    for (std::size_t i = 0; i < n; ++i) {
      u &= ~(std::uint64_t{0xff} << (8 * i));
      u |= std::uint64_t{static_cast<unsigned char>(raw[i])} << (8 * i);
    }
    return MakeInt(static_cast<std::int64_t>(u));
  }
  TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kBigInt));
  x->s.assign(raw.substr(0, n));
  return x;
}

Status Unpickler::Run::Put(std::uint64_t key) {
  TS_ASSIGN_OR_RETURN(Value * v, Top());
  auto [it, inserted] = memo_.try_emplace(key, v);
  if (!inserted) {
    it->second = v;
  } else if (memo_.size() > u_.limits_.max_memo_entries) {
    return LimitExceeded(At() + "more than " + Str(u_.limits_.max_memo_entries) +
                         " memo entries (Limits::max_memo_entries)");
  }
  return Status::OK();
}

Status Unpickler::Run::Get(std::uint64_t key) {
  auto it = memo_.find(key);
  if (it == memo_.end()) return Corrupt("memo entry " + Str(key) + " was never stored (BINPUT/MEMOIZE)");
  return Push(it->second);
}

Status Unpickler::Run::SetItem(Value* d, Value* k, Value* v) {
  auto key = CanonicalKey(*k);
  if (!key) return Corrupt(std::string("a dict key that Python cannot hash (") + std::string(KindText(*k)) + ")");
  if (!d->index) d->index = std::make_unique<std::unordered_map<std::string, std::size_t>>();
  auto [it, inserted] = d->index->try_emplace(std::move(*key), d->items.size());
  if (!inserted) {
    d->items[it->second + 1] = v;  // Python keeps the first key object and position
    return Status::OK();
  }
  TS_RETURN_IF_ERROR(CheckItems(d->items.size() / 2 + 1));
  d->items.push_back(k);
  d->items.push_back(v);
  return Status::OK();
}

Status Unpickler::Run::AddToSet(Value* s, Value* item) {
  auto key = CanonicalKey(*item);
  if (!key) return Corrupt(std::string("a set item that Python cannot hash (") + std::string(KindText(*item)) + ")");
  if (!s->index) s->index = std::make_unique<std::unordered_map<std::string, std::size_t>>();
  if (s->index->try_emplace(std::move(*key), s->items.size()).second) {
    TS_RETURN_IF_ERROR(CheckItems(s->items.size() + 1));
    s->items.push_back(item);
  }
  return Status::OK();
}

// SETITEM/SETITEMS apply to dicts only (CVE-2026-24747: torch's unpickler
// once let them write into other objects).
Status Unpickler::Run::NeedDict(Value* d, std::string_view what) const {
  if (d->kind != Kind::kDict) {
    return Refuse(std::string(what) + " applies to dicts, and the target is " + std::string(KindText(*d)));
  }
  return Status::OK();
}

Status Unpickler::Run::Step() {
  switch (op_) {
    case 0x80: {  // PROTO
      TS_ASSIGN_OR_RETURN(std::uint64_t v, Fixed(1));
      if (v > 5) return Refuse("pickle protocol " + Str(v) + " (at most 5 exists)");
      return Status::OK();
    }
    case 0x95: {  // FRAME: a buffering hint; its length must fit
      TS_ASSIGN_OR_RETURN(std::uint64_t n, Fixed(8));
      if (n > b_.size() - pos_) return Corrupt("a frame of " + Str(n) + " bytes, " + Str(b_.size() - pos_) + " remain");
      return Status::OK();
    }
    case '(':  // MARK
      if (marks_.size() >= u_.limits_.max_depth) {
        return LimitExceeded(At() + "more than " + Str(u_.limits_.max_depth) + " MARKs open (Limits::max_depth)");
      }
      marks_.push_back(stack_.size());
      return Status::OK();
    case '0': {  // POP: the top value, or the mark when nothing is above it
      if (stack_.size() > Floor()) {
        stack_.pop_back();
        return Status::OK();
      }
      return PopMark().status();
    }
    case '1':  // POP_MARK
      return PopMark().status();
    case '2': {  // DUP
      TS_ASSIGN_OR_RETURN(Value * v, Top());
      return Push(v);
    }
    case 'N': {  // NONE
      TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kNone));
      return Push(x);
    }
    case 0x88:
    case 0x89: {  // NEWTRUE, NEWFALSE
      TS_ASSIGN_OR_RETURN(Value * v, New(Kind::kBool));
      v->i = op_ == 0x88;
      return Push(v);
    }
    case 'J': {  // BININT
      TS_ASSIGN_OR_RETURN(std::uint64_t v, Fixed(4));
      TS_ASSIGN_OR_RETURN(Value * x, MakeInt(static_cast<std::int32_t>(static_cast<std::uint32_t>(v))));
      return Push(x);
    }
    case 'K':
    case 'M': {  // BININT1, BININT2
      TS_ASSIGN_OR_RETURN(std::uint64_t v, Fixed(op_ == 'K' ? 1 : 2));
      TS_ASSIGN_OR_RETURN(Value * x, MakeInt(static_cast<std::int64_t>(v)));
      return Push(x);
    }
    case 0x8a:
    case 0x8b: {  // LONG1, LONG4
      std::uint64_t n;
      if (op_ == 0x8a) {
        TS_ASSIGN_OR_RETURN(n, Fixed(1));
      } else {
        TS_ASSIGN_OR_RETURN(std::uint64_t raw, Fixed(4));
        if (static_cast<std::int32_t>(static_cast<std::uint32_t>(raw)) < 0) return Corrupt("a negative byte count");
        n = raw;
      }
      TS_ASSIGN_OR_RETURN(std::string_view bytes, Raw(n));
      TS_ASSIGN_OR_RETURN(Value * x, MakeLong(bytes));
      return Push(x);
    }
    case 'G': {  // BINFLOAT, big-endian
      TS_ASSIGN_OR_RETURN(std::string_view raw, Raw(8));
      std::uint64_t u = 0;
      for (char c : raw) u = (u << 8) | static_cast<unsigned char>(c);
      TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kFloat));
      x->re = std::bit_cast<double>(u);
      return Push(x);
    }
    case 'X':
    case 0x8c:
    case 0x8d:  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
    case 'U':
    case 'T':  // SHORT_BINSTRING, BINSTRING (Python 2 str, read as UTF-8 text)
    case 'B':
    case 'C':
    case 0x8e:
    case 0x96: {  // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
      const int width = op_ == 0x8c || op_ == 'U' || op_ == 'C' ? 1 : op_ == 0x8d || op_ == 0x8e || op_ == 0x96 ? 8 : 4;
      TS_ASSIGN_OR_RETURN(std::uint64_t n, Fixed(width));
      if (op_ == 'T' && static_cast<std::int32_t>(static_cast<std::uint32_t>(n)) < 0) {
        return Corrupt("a negative length");
      }
      TS_ASSIGN_OR_RETURN(std::string_view s, Raw(n));
      const bool bytes = op_ == 'B' || op_ == 'C' || op_ == 0x8e || op_ == 0x96;
      TS_ASSIGN_OR_RETURN(Value * x, MakeStr(s, bytes));
      return Push(x);
    }
    case ')': {  // EMPTY_TUPLE
      TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kTuple));
      return Push(x);
    }
    case ']':
    case '}':
    case 0x8f: {  // EMPTY_LIST, EMPTY_DICT, EMPTY_SET
      TS_ASSIGN_OR_RETURN(Value * x, New(op_ == ']' ? Kind::kList : op_ == '}' ? Kind::kDict : Kind::kSet));
      return Push(x);
    }
    case 't':
    case 'l': {  // TUPLE, LIST
      TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
      TS_RETURN_IF_ERROR(CheckItems(items.size()));
      TS_ASSIGN_OR_RETURN(Value * x, New(op_ == 't' ? Kind::kTuple : Kind::kList));
      x->items = std::move(items);
      return Push(x);
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      const std::size_t n = op_ - 0x84;
      if (stack_.size() < Floor() + n) {
        return Corrupt("needs " + Str(n) + " values on the stack, " + Str(stack_.size() - Floor()) + " are there");
      }
      TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kTuple));
      x->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
      stack_.resize(stack_.size() - n);
      return Push(x);
    }
    case 'd': {  // DICT
      TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
      if (items.size() % 2) return Corrupt("an odd number of values (" + Str(items.size()) + ") for key/value pairs");
      TS_ASSIGN_OR_RETURN(Value * d, New(Kind::kDict));
      for (std::size_t i = 0; i < items.size(); i += 2) TS_RETURN_IF_ERROR(SetItem(d, items[i], items[i + 1]));
      return Push(d);
    }
    case 'a': {  // APPEND
      TS_ASSIGN_OR_RETURN(Value * item, Pop());
      TS_ASSIGN_OR_RETURN(Value * list, Top());
      if (list->kind != Kind::kList)
        return Refuse("APPEND applies to lists, the target is " + std::string(KindText(*list)));
      TS_RETURN_IF_ERROR(CheckItems(list->items.size() + 1));
      list->items.push_back(item);
      return Status::OK();
    }
    case 'e': {  // APPENDS
      TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
      TS_ASSIGN_OR_RETURN(Value * list, Top());
      if (list->kind != Kind::kList)
        return Refuse("APPENDS applies to lists, the target is " + std::string(KindText(*list)));
      TS_RETURN_IF_ERROR(CheckItems(list->items.size() + items.size()));
      list->items.insert(list->items.end(), items.begin(), items.end());
      return Status::OK();
    }
    case 0x90: {  // ADDITEMS
      TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
      TS_ASSIGN_OR_RETURN(Value * set, Top());
      if (set->kind != Kind::kSet)
        return Refuse("ADDITEMS applies to sets, the target is " + std::string(KindText(*set)));
      for (Value* item : items) TS_RETURN_IF_ERROR(AddToSet(set, item));
      return Status::OK();
    }
    case 's': {  // SETITEM
      TS_ASSIGN_OR_RETURN(Value * v, Pop());
      TS_ASSIGN_OR_RETURN(Value * k, Pop());
      TS_ASSIGN_OR_RETURN(Value * d, Top());
      TS_RETURN_IF_ERROR(NeedDict(d, "SETITEM"));
      return SetItem(d, k, v);
    }
    case 'u': {  // SETITEMS
      TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
      TS_ASSIGN_OR_RETURN(Value * d, Top());
      TS_RETURN_IF_ERROR(NeedDict(d, "SETITEMS"));
      if (items.size() % 2) return Corrupt("an odd number of values (" + Str(items.size()) + ") for key/value pairs");
      for (std::size_t i = 0; i < items.size(); i += 2) TS_RETURN_IF_ERROR(SetItem(d, items[i], items[i + 1]));
      return Status::OK();
    }
    case 'q':
    case 'r': {  // BINPUT, LONG_BINPUT
      TS_ASSIGN_OR_RETURN(std::uint64_t k, Fixed(op_ == 'q' ? 1 : 4));
      return Put(k);
    }
    case 0x94:  // MEMOIZE
      return Put(memo_.size());
    case 'h':
    case 'j': {  // BINGET, LONG_BINGET
      TS_ASSIGN_OR_RETURN(std::uint64_t k, Fixed(op_ == 'h' ? 1 : 4));
      return Get(k);
    }
    case 'c': {  // GLOBAL "module\nname\n"
      TS_ASSIGN_OR_RETURN(std::string_view module, Line());
      TS_ASSIGN_OR_RETURN(std::string_view name, Line());
      return PushGlobal(module, name);
    }
    case 0x93: {  // STACK_GLOBAL
      TS_ASSIGN_OR_RETURN(Value * name, Pop());
      TS_ASSIGN_OR_RETURN(Value * module, Pop());
      if (name->kind != Kind::kStr || module->kind != Kind::kStr) {
        return Corrupt("module and name must be strings, they are " + std::string(KindText(*module)) + " and " +
                       std::string(KindText(*name)));
      }
      return PushGlobal(module->s, name->s);
    }
    case 'R': {  // REDUCE
      TS_ASSIGN_OR_RETURN(Value * args, Pop());
      TS_ASSIGN_OR_RETURN(Value * f, Top());
      if (f->kind != Kind::kGlobal) return Refuse("calls " + std::string(KindText(*f)) + ", not an allowed global");
      TS_ASSIGN_OR_RETURN(Value * r, Call(f->g, args, false));
      stack_.back() = r;
      return Status::OK();
    }
    case 0x81: {  // NEWOBJ
      TS_ASSIGN_OR_RETURN(Value * args, Pop());
      TS_ASSIGN_OR_RETURN(Value * cls, Pop());
      if (cls->kind != Kind::kGlobal)
        return Refuse("instantiates " + std::string(KindText(*cls)) + ", not an allowed class");
      TS_ASSIGN_OR_RETURN(Value * r, Call(cls->g, args, true));
      return Push(r);
    }
    case 'b': {  // BUILD
      TS_ASSIGN_OR_RETURN(Value * state, Pop());
      TS_ASSIGN_OR_RETURN(Value * inst, Top());
      return Build(inst, state);
    }
    case 'Q': {  // BINPERSID
      if (u_.allow_ == Allow::kDcpMetadata) return Refuse("DCP's metadata holds no persistent ids");
      TS_ASSIGN_OR_RETURN(Value * pid, Pop());
      TS_ASSIGN_OR_RETURN(Value * s, PersistentLoad(pid));
      return Push(s);
    }
    default: break;
  }
  if (OpcodeName(op_).empty()) return Corrupt("not an opcode of any pickle protocol");
  return Refuse("the opcode is not allowed: " + std::string(RefusedWhy(op_)));
}

Status Unpickler::Run::PushGlobal(std::string_view module, std::string_view name) {
  if (!IsValidUtf8(module) || !IsValidUtf8(name)) return Corrupt("a global whose name is not UTF-8");
  auto g = ResolveGlobal(module, name, u_.allow_);
  if (!g.ok()) return Unsupported(At() + g.status().message());
  TS_ASSIGN_OR_RETURN(Value * v, New(Kind::kGlobal));
  v->g = *g;
  return Push(v);
}
Result<Value*> Unpickler::Load(std::size_t pos, std::size_t* end) {
  Run run(*this, pos);
  return run.Go(end);
}

}  // namespace tensorsafe::pytorch::internal
