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

std::string N(std::uint64_t v) { return std::to_string(v); }

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
    {'(', "MARK"},         {'.', "STOP"},          {'0', "POP"},          {'1', "POP_MARK"},
    {'2', "DUP"},          {'F', "FLOAT"},         {'I', "INT"},          {'J', "BININT"},
    {'K', "BININT1"},      {'L', "LONG"},          {'M', "BININT2"},      {'N', "NONE"},
    {'P', "PERSID"},       {'Q', "BINPERSID"},     {'R', "REDUCE"},       {'S', "STRING"},
    {'T', "BINSTRING"},    {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"},    {'X', "BINUNICODE"},
    {'a', "APPEND"},       {'b', "BUILD"},         {'c', "GLOBAL"},       {'d', "DICT"},
    {'}', "EMPTY_DICT"},   {'e', "APPENDS"},       {'g', "GET"},          {'h', "BINGET"},
    {'i', "INST"},         {'j', "LONG_BINGET"},   {'l', "LIST"},         {']', "EMPTY_LIST"},
    {'o', "OBJ"},          {'p', "PUT"},           {'q', "BINPUT"},       {'r', "LONG_BINPUT"},
    {'s', "SETITEM"},      {'t', "TUPLE"},         {')', "EMPTY_TUPLE"},  {'u', "SETITEMS"},
    {'G', "BINFLOAT"},     {0x80, "PROTO"},        {0x81, "NEWOBJ"},      {0x82, "EXT1"},
    {0x83, "EXT2"},        {0x84, "EXT4"},         {0x85, "TUPLE1"},      {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},      {0x88, "NEWTRUE"},      {0x89, "NEWFALSE"},    {0x8a, "LONG1"},
    {0x8b, "LONG4"},       {'B', "BINBYTES"},      {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"},    {0x8f, "EMPTY_SET"},   {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},   {0x92, "NEWOBJ_EX"},    {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
    {0x95, "FRAME"},       {0x96, "BYTEARRAY8"},   {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
};

std::string OpLabel(std::uint8_t op) {
  static const char* kHex = "0123456789abcdef";
  std::string hex = "0x";
  hex += kHex[op >> 4];
  hex += kHex[op & 15];
  const std::string_view name = OpcodeName(op);
  return name.empty() ? "byte " + hex + " (no opcode)" : std::string(name) + " (" + hex + ")";
}

// Why an opcode that exists is refused.
std::string_view RefusedWhy(std::uint8_t op) {
  switch (op) {
    case 'i': case 'o': case 0x92:
      return "it instantiates a class";
    case 0x82: case 0x83: case 0x84:
      return "it looks up the copyreg extension registry";
    case 'P':
      return "text persistent ids are not written by torch.save";
    case 0x97: case 0x98:
      return "out-of-band buffers are not written by torch.save";
    case 0x91:
      return "frozensets are not written by torch.save";
    default:
      return "protocol 0 text opcodes are not written by torch.save (protocol 2 and up)";
  }
}

// Canonical text of a hashable key, equal for keys Python's dict treats as
// one (1, 1.0 and True; equal strings), so SETITEM replaces as dict does.
std::optional<std::string> CanonicalKey(const Value& v, int depth = 0) {
  if (depth > 64) return std::nullopt;
  switch (v.kind) {
    case Kind::kNone: return std::string("N");
    case Kind::kBool: case Kind::kInt: return "I" + std::to_string(v.i);
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
    case Kind::kList: case Kind::kDict: case Kind::kSet:
      return std::nullopt;
  }
  return std::nullopt;
}

bool IsStrLike(const Value* v) { return v->kind == Kind::kStr || v->kind == Kind::kBytes; }

}  // namespace

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
    case Kind::kInt: case Kind::kBigInt: return "an int";
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
    return LimitExceeded(where_ + ": the pickle makes more than " + N(limits_.max_values) +
                         " values (Limits::max_values)");
  }
  Value& v = arena_.emplace_back();
  v.kind = kind;
  return &v;
}

// One pickle.load(): its stack, marks and memo.
class Unpickler::Run {
 public:
  Run(Unpickler& u, std::size_t pos) : u_(u), b_(u.bytes_), start_(pos), pos_(pos) {}

  Result<Value*> Go(std::size_t* end) {
    for (;;) {
      if (pos_ >= b_.size()) return Corrupt("the pickle ends before its STOP opcode");
      if (pos_ - start_ >= u_.limits_.max_pickle_bytes) {
        return LimitExceeded(u_.where_ + ": the pickle is longer than " + N(u_.limits_.max_pickle_bytes) +
                             " bytes (Limits::max_pickle_bytes)");
      }
      op_at_ = pos_;
      op_ = static_cast<std::uint8_t>(b_[pos_++]);
      if (op_ == '.') {
        if (!marks_.empty()) return Corrupt("STOP with " + N(marks_.size()) + " MARK(s) still open");
        if (stack_.size() != 1) {
          return Corrupt("STOP with " + N(stack_.size()) + " values on the stack (torch.save leaves exactly one)");
        }
        *end = pos_;
        return stack_[0];
      }
      TS_RETURN_IF_ERROR(Step());
    }
  }

 private:
  // --- errors --------------------------------------------------------------
  std::string At() const { return u_.where_ + ": offset " + N(op_at_) + ": " + OpLabel(op_) + ": "; }
  Status Corrupt(const std::string& msg) const { return Corruption(At() + msg); }
  Status Refuse(const std::string& msg) const { return Unsupported(At() + msg); }

  // --- reading operands ----------------------------------------------------
  Status Need(std::uint64_t n) const {
    if (n > b_.size() - pos_) {
      return Corrupt("needs " + N(n) + " operand bytes, " + N(b_.size() - pos_) + " remain (truncated)");
    }
    return Status::OK();
  }
  Result<std::uint64_t> Fixed(int n) {
    TS_RETURN_IF_ERROR(Need(n));
    const std::byte* p = b_.data() + pos_;
    pos_ += n;
    switch (n) {
      case 1: return static_cast<std::uint8_t>(p[0]);
      case 2: return Load16(p);
      case 4: return Load32(p);
      default: return Load64(p);
    }
  }
  Result<std::string_view> Raw(std::uint64_t n) {
    TS_RETURN_IF_ERROR(Need(n));
    std::string_view s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  Result<std::string_view> Line() {
    const char* p = reinterpret_cast<const char*>(b_.data() + pos_);
    const void* nl = std::memchr(p, '\n', b_.size() - pos_);
    if (!nl) return Corrupt("no newline ends its text operand (truncated)");
    const std::size_t n = static_cast<const char*>(nl) - p;
    pos_ += n + 1;
    return std::string_view(p, n);
  }

  // --- stack ---------------------------------------------------------------
  std::size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  Result<Value*> Pop() {
    if (stack_.size() <= Floor()) return Corrupt("pops from an empty stack (stack underflow)");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Result<Value*> Top() {
    if (stack_.size() <= Floor()) return Corrupt("needs a value on the stack, which is empty");
    return stack_.back();
  }
  Status Push(Value* v) {
    stack_.push_back(v);
    return Status::OK();
  }
  Result<std::vector<Value*>> PopMark() {
    if (marks_.empty()) return Corrupt("needs a MARK, and none is open");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Result<Value*> New(Kind k) { return u_.New(k); }
  Status CheckItems(std::uint64_t n) const {
    if (n > u_.limits_.max_container_items) {
      return LimitExceeded(At() + "a container of " + N(n) + " items, more than " +
                           N(u_.limits_.max_container_items) + " (Limits::max_container_items)");
    }
    return Status::OK();
  }

  Result<Value*> MakeInt(std::int64_t v) {
    TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kInt));
    x->i = v;
    return x;
  }
  Result<Value*> MakeStr(std::string_view s, bool bytes) {
    if (!bytes && !IsValidUtf8(s)) return Corrupt("the string is not valid UTF-8");
    TS_ASSIGN_OR_RETURN(Value * x, New(bytes ? Kind::kBytes : Kind::kStr));
    x->s.assign(s);
    return x;
  }
  // Two's complement little-endian, as pickle's decode_long.
  Result<Value*> MakeLong(std::string_view raw) {
    if (raw.size() > kMaxIntBytes) {
      return Refuse("an integer of " + N(raw.size()) + " bytes (more than " + N(kMaxIntBytes) + " are refused)");
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

  // --- memo ----------------------------------------------------------------
  Status Put(std::uint64_t key) {
    TS_ASSIGN_OR_RETURN(Value * v, Top());
    auto [it, inserted] = memo_.try_emplace(key, v);
    if (!inserted) {
      it->second = v;
    } else if (memo_.size() > u_.limits_.max_memo_entries) {
      return LimitExceeded(At() + "more than " + N(u_.limits_.max_memo_entries) +
                           " memo entries (Limits::max_memo_entries)");
    }
    return Status::OK();
  }
  Status Get(std::uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return Corrupt("memo entry " + N(key) + " was never stored (BINPUT/MEMOIZE)");
    return Push(it->second);
  }

  // --- containers ----------------------------------------------------------
  Status SetItem(Value* d, Value* k, Value* v) {
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
  Status AddToSet(Value* s, Value* item) {
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
  Status NeedDict(Value* d, std::string_view what) const {
    if (d->kind != Kind::kDict) {
      return Refuse(std::string(what) + " applies to dicts, and the target is " + std::string(KindText(*d)));
    }
    return Status::OK();
  }

  // --- storages and tensors ------------------------------------------------
  Result<std::string> KeyOf(const Value* v, std::string_view what) const {
    if (!IsStrLike(v)) {
      return Corrupt("the persistent id's " + std::string(what) + " is " + std::string(KindText(*v)) +
                     ", not a string");
    }
    return v->s;
  }

  // BINPERSID: ("storage", storage type, key, location, numel[, view]).
  Result<Value*> PersistentLoad(Value* pid) {
    if (pid->kind != Kind::kTuple || pid->items.empty()) {
      return Refuse("the persistent id is " + std::string(KindText(*pid)) +
                    "; torch.save writes a tuple (\"storage\", ...)");
    }
    const std::vector<Value*>& t = pid->items;
    if (!IsStrLike(t[0]) || t[0]->s != "storage") {
      if (IsStrLike(t[0]) && t[0]->s == "module") {
        return Refuse("a pickled nn.Module class (torch.save(model) rather than model.state_dict()) is not "
                      "supported: it would need the module's code");
      }
      return Refuse("only persistent ids of type \"storage\" are allowed");
    }
    const std::size_t want = u_.form_ == PidForm::kZip ? 5 : 6;
    if (t.size() != want) {
      return Corrupt("a storage persistent id of " + N(t.size()) + " items; this container writes " + N(want));
    }
    if (t[1]->kind != Kind::kGlobal || t[1]->g.kind != GlobalKind::kStorageType) {
      return Corrupt("the storage type is " + std::string(KindText(*t[1])) + ", not a storage class");
    }
    const std::uint16_t type = t[1]->g.arg;
    TS_ASSIGN_OR_RETURN(std::string key, KeyOf(t[2], "key"));
    TS_ASSIGN_OR_RETURN(std::string location, KeyOf(t[3], "location"));
    if (t[4]->kind != Kind::kInt || t[4]->i < 0) {
      return Corrupt("storage " + QuoteName(key) + ": the element count is " + std::string(KindText(*t[4])) +
                     (t[4]->kind == Kind::kInt ? " below zero" : "") + ", not a count");
    }
    const std::uint64_t numel = static_cast<std::uint64_t>(t[4]->i);
    const std::uint32_t esize = type == kUntyped ? 1 : TorchDTypeAt(type).itemsize;
    auto nbytes = CheckedMul(numel, esize);
    if (!nbytes) return Corrupt("storage " + QuoteName(key) + ": " + N(numel) + " elements overflow 64-bit sizes");
    TS_ASSIGN_OR_RETURN(std::size_t index, Declare(key, type, numel, *nbytes, location));
    if (u_.form_ == PidForm::kLegacy && t[5]->kind != Kind::kNone) {
      // (view key, offset, size) in elements of the root's type.
      const Value* view = t[5];
      if (view->kind != Kind::kTuple || view->items.size() != 3 || view->items[1]->kind != Kind::kInt ||
          view->items[2]->kind != Kind::kInt || view->items[1]->i < 0 || view->items[2]->i < 0) {
        return Corrupt("storage " + QuoteName(key) + ": the view is not (key, offset, size)");
      }
      TS_ASSIGN_OR_RETURN(std::string view_key, KeyOf(view->items[0], "view key"));
      const auto off = static_cast<std::uint64_t>(view->items[1]->i);
      const auto size = static_cast<std::uint64_t>(view->items[2]->i);
      auto end = CheckedAdd(off, size);
      if (!end || *end > numel) {
        return Corrupt("storage view " + QuoteName(view_key) + ": elements " + N(off) + " + " + N(size) +
                       " lie outside storage " + QuoteName(key) + " of " + N(numel));
      }
      TS_ASSIGN_OR_RETURN(std::size_t v, Declare(view_key, type, size, size * esize, location));
      StorageDecl& sd = u_.tables_.storages[v];
      if (sd.view_of && (*sd.view_of != index || sd.view_offset != off * esize)) {
        return Corrupt("storage view " + QuoteName(view_key) + " is declared twice with different roots");
      }
      if (v == index) return Corrupt("storage " + QuoteName(key) + " is declared as a view of itself");
      sd.view_of = index;
      sd.view_offset = off * esize;
      index = v;
    }
    TS_ASSIGN_OR_RETURN(Value * s, New(Kind::kStorage));
    s->i = static_cast<std::int64_t>(index);
    return s;
  }

  Result<std::size_t> Declare(const std::string& key, std::uint16_t type, std::uint64_t numel,
                              std::uint64_t nbytes, const std::string& location) {
    Tables& tb = u_.tables_;
    auto it = tb.storage_by_key.find(key);
    if (it != tb.storage_by_key.end()) {
      const StorageDecl& d = tb.storages[it->second];
      // torch.save never declares a key twice differently; torch.load would
      // silently keep the first declaration.
      if (d.type != type || d.numel != numel) {
        return Corrupt("storage " + QuoteName(key) + " is declared as " +
                       GlobalName({GlobalKind::kStorageType, d.type}) + " of " + N(d.numel) + " elements, then as " +
                       GlobalName({GlobalKind::kStorageType, type}) + " of " + N(numel));
      }
      return it->second;
    }
    StorageDecl d;
    d.key = key;
    d.type = type;
    d.numel = numel;
    d.nbytes = nbytes;
    d.location = location;
    tb.storages.push_back(std::move(d));
    tb.storage_by_key.emplace(key, tb.storages.size() - 1);
    return tb.storages.size() - 1;
  }

  Result<std::vector<std::uint64_t>> Dims(const Value* v, std::string_view what) const {
    if (v->kind != Kind::kTuple && v->kind != Kind::kList) {
      return Corrupt("the tensor's " + std::string(what) + " is " + std::string(KindText(*v)) + ", not a tuple");
    }
    if (v->items.size() > u_.limits_.max_rank) {
      return LimitExceeded(At() + "a tensor of rank " + N(v->items.size()) + ", more than " +
                           N(u_.limits_.max_rank) + " (Limits::max_rank)");
    }
    std::vector<std::uint64_t> out;
    out.reserve(v->items.size());
    for (const Value* d : v->items) {
      if (d->kind != Kind::kInt) {
        return Corrupt("the tensor's " + std::string(what) + " holds " + std::string(KindText(*d)));
      }
      if (d->i < 0) return Corrupt("the tensor's " + std::string(what) + " holds " + std::to_string(d->i));
      out.push_back(static_cast<std::uint64_t>(d->i));
    }
    return out;
  }

  // _rebuild_tensor(storage, offset, size, stride) and its v2/v3 forms: the
  // geometry torch's set_() accepts, checked against the storage.
  Result<Value*> RebuildTensor(GlobalKind kind, const std::vector<Value*>& a) {
    const std::size_t n = a.size();
    const bool ok_arity = kind == GlobalKind::kRebuildTensor     ? n == 4
                          : kind == GlobalKind::kRebuildTensorV2 ? n == 6 || n == 7
                                                                 : n == 7 || n == 8;
    if (!ok_arity) return Corrupt(GlobalName({kind}) + " called with " + N(n) + " arguments");
    if (a[0]->kind != Kind::kStorage) {
      return Corrupt(GlobalName({kind}) + ": the storage argument is " + std::string(KindText(*a[0])));
    }
    const std::size_t si = static_cast<std::size_t>(a[0]->i);
    const StorageDecl& sd = u_.tables_.storages[si];
    std::uint16_t dtype;
    if (kind == GlobalKind::kRebuildTensorV3) {
      if (a[6]->kind != Kind::kGlobal || a[6]->g.kind != GlobalKind::kDType) {
        return Corrupt("_rebuild_tensor_v3: the dtype argument is " + std::string(KindText(*a[6])));
      }
      dtype = a[6]->g.arg;
    } else {
      dtype = sd.type == kUntyped ? *FindTorchDType("uint8") : sd.type;
    }
    const TorchDType& td = TorchDTypeAt(dtype);
    if (!td.dtype || td.itemsize == 0) {
      return Refuse("storage " + QuoteName(sd.key) + ": dtype torch." + std::string(td.name) +
                    " has no tensorsafe equivalent");
    }
    if (a[1]->kind != Kind::kInt || a[1]->i < 0) {
      return Corrupt("the storage offset is " + std::string(KindText(*a[1])) +
                     (a[1]->kind == Kind::kInt ? " below zero" : ""));
    }
    if (kind != GlobalKind::kRebuildTensor) {
      if (a[4]->kind != Kind::kBool) return Corrupt("requires_grad is " + std::string(KindText(*a[4])));
      if (a[5]->kind != Kind::kDict && a[5]->kind != Kind::kNone) {
        return Corrupt("backward_hooks is " + std::string(KindText(*a[5])) + ", not a dict");
      }
      const std::size_t meta = kind == GlobalKind::kRebuildTensorV2 ? 6 : 7;
      if (n > meta && a[meta]->kind != Kind::kDict && a[meta]->kind != Kind::kNone) {
        return Corrupt("the tensor metadata is " + std::string(KindText(*a[meta])) + ", not a dict");
      }
    }
    TensorDecl t;
    t.storage = si;
    t.dtype = dtype;
    t.offset = static_cast<std::uint64_t>(a[1]->i);
    TS_ASSIGN_OR_RETURN(t.shape, Dims(a[2], "size"));
    TS_ASSIGN_OR_RETURN(t.stride, Dims(a[3], "stride"));
    if (t.shape.size() != t.stride.size()) {
      return Corrupt("the tensor has " + N(t.shape.size()) + " sizes and " + N(t.stride.size()) + " strides");
    }
    // The non-zero dimensions' product must fit (NumPy's rule, so the
    // verdict does not depend on where a zero dimension sits).
    std::uint64_t nonzero = 1, last = t.offset;
    bool empty = false;
    for (std::uint64_t d : t.shape) {
      if (d == 0) {
        empty = true;
        continue;
      }
      auto m = CheckedMul(nonzero, d);
      if (!m) return Corrupt("the tensor's dimensions " + ShapeToString(t.shape) + " multiply past 2^64");
      nonzero = *m;
    }
    if (td.f4x2 && !t.shape.empty() && t.shape.back() > (std::uint64_t{1} << 62)) {
      return Corrupt("a float4_e2m1fn_x2 dimension of " + N(t.shape.back()) + " bytes");
    }
    const std::uint64_t numel = empty ? 0 : nonzero;
    if (numel != 0) {
      for (std::size_t i = 0; i < t.shape.size(); ++i) {
        auto step = CheckedMul(t.shape[i] - 1, t.stride[i]);
        auto sum = step ? CheckedAdd(last, *step) : std::nullopt;
        if (!sum) return Corrupt("the tensor's extent overflows 64 bits");
        last = *sum;
      }
      // The last element's end, in bytes, must lie within the storage.
      auto end = CheckedAdd(last, 1);
      auto end_bytes = end ? CheckedMul(*end, td.itemsize) : std::nullopt;
      if (!end_bytes || *end_bytes > sd.nbytes) {
        return Corrupt("a tensor of size " + ShapeToString(t.shape) + ", stride " + ShapeToString(t.stride) +
                       " and offset " + N(t.offset) + " of torch." + std::string(td.name) + " needs " +
                       (end_bytes ? N(*end_bytes) : std::string("more than 2^64")) + " bytes of storage " +
                       QuoteName(sd.key) + ", which has " + N(sd.nbytes));
      }
    }
    if (td.f4x2 && t.shape.empty()) {
      return Refuse("a 0-dimensional float4_e2m1fn_x2 tensor (two f4 elements with no dimension to hold them)");
    }
    u_.tables_.tensors.push_back(std::move(t));
    TS_ASSIGN_OR_RETURN(Value * v, New(Kind::kTensor));
    v->i = static_cast<std::int64_t>(u_.tables_.tensors.size() - 1);
    return v;
  }

  // A callable global applied to `args` (REDUCE), or a class instantiated
  // (NEWOBJ). Each case is the whole of what that global may do here.
  Result<Value*> Call(const Global& g, Value* args_tuple, bool newobj) {
    if (args_tuple->kind != Kind::kTuple) {
      return Corrupt("the arguments are " + std::string(KindText(*args_tuple)) + ", not a tuple");
    }
    const std::vector<Value*>& a = args_tuple->items;
    const std::string name = GlobalName(g);
    auto arity = [&](std::string_view want) {
      return Corrupt(name + " called with " + N(a.size()) + " arguments (" + std::string(want) + ")");
    };
    switch (g.kind) {
      case GlobalKind::kOrderedDict:
      case GlobalKind::kCounter: {
        TS_ASSIGN_OR_RETURN(Value * d, New(Kind::kDict));
        if (a.empty()) return d;
        if (a.size() != 1 || newobj || (a[0]->kind != Kind::kList && a[0]->kind != Kind::kTuple)) {
          return arity("none, or one list of pairs");
        }
        for (Value* pair : a[0]->items) {
          if ((pair->kind != Kind::kTuple && pair->kind != Kind::kList) || pair->items.size() != 2) {
            return Corrupt(name + ": an item of its list is not a (key, value) pair");
          }
          TS_RETURN_IF_ERROR(SetItem(d, pair->items[0], pair->items[1]));
        }
        return d;
      }
      case GlobalKind::kParameterClass:
        if (!newobj) break;
        [[fallthrough]];
      case GlobalKind::kRebuildParameter:
      case GlobalKind::kRebuildParameterWithState: {
        // Parameter(data[, requires_grad]); _rebuild_parameter(data,
        // requires_grad, hooks[, state]): the data tensor itself.
        const std::size_t want = g.kind == GlobalKind::kParameterClass        ? 0
                                 : g.kind == GlobalKind::kRebuildParameter ? 3
                                                                           : 4;
        if (want == 0 ? (a.empty() || a.size() > 2) : a.size() != want) return arity("a tensor and its flags");
        if (a[0]->kind != Kind::kTensor) return Corrupt(name + ": the data is " + std::string(KindText(*a[0])));
        if (a.size() > 1 && a[1]->kind != Kind::kBool) {
          return Corrupt(name + ": requires_grad is " + std::string(KindText(*a[1])));
        }
        return a[0];
      }
      case GlobalKind::kRebuildTensor:
      case GlobalKind::kRebuildTensorV2:
      case GlobalKind::kRebuildTensorV3:
        if (newobj) break;
        return RebuildTensor(g.kind, a);
      case GlobalKind::kRebuildFromTypeV2: {
        // (func, new_type, args, state): a tensor with Python attributes,
        // or of a subclass; only plain tensors and parameters are taken,
        // and the attributes (`state`) are dropped.
        if (newobj) break;
        if (a.size() != 4) return arity("func, type, args, state");
        if (a[0]->kind != Kind::kGlobal ||
            (a[0]->g.kind != GlobalKind::kRebuildTensor && a[0]->g.kind != GlobalKind::kRebuildTensorV2 &&
             a[0]->g.kind != GlobalKind::kRebuildTensorV3 && a[0]->g.kind != GlobalKind::kRebuildParameter &&
             a[0]->g.kind != GlobalKind::kRebuildParameterWithState)) {
          return Refuse(name + ": the rebuild function must be a tensor rebuild function");
        }
        if (a[1]->kind != Kind::kGlobal ||
            (a[1]->g.kind != GlobalKind::kTensorClass && a[1]->g.kind != GlobalKind::kParameterClass)) {
          return Refuse(name + ": tensor subclasses other than torch.nn.Parameter are not supported");
        }
        if (a[3]->kind != Kind::kDict && a[3]->kind != Kind::kNone && a[3]->kind != Kind::kTuple) {
          return Corrupt(name + ": the state is " + std::string(KindText(*a[3])));
        }
        return Call(a[0]->g, a[2], false);
      }
      case GlobalKind::kSize: {
        if (a.size() != 1 || (a[0]->kind != Kind::kTuple && a[0]->kind != Kind::kList)) {
          return arity("one tuple");
        }
        for (const Value* d : a[0]->items) {
          if (d->kind != Kind::kInt) return Corrupt("torch.Size of " + std::string(KindText(*d)));
        }
        TS_ASSIGN_OR_RETURN(Value * t, New(Kind::kTuple));
        t->items = a[0]->items;
        return t;
      }
      case GlobalKind::kDevice: {
        // torch.device("cpu"), torch.device("cuda", 0): its str().
        if (newobj || a.empty() || a.size() > 2 || a[0]->kind != Kind::kStr ||
            (a.size() == 2 && a[1]->kind != Kind::kInt && a[1]->kind != Kind::kNone)) {
          return arity("a type string and an optional index");
        }
        std::string s = a[0]->s;
        if (a.size() == 2 && a[1]->kind == Kind::kInt) s += ":" + std::to_string(a[1]->i);
        return MakeStr(s, false);
      }
      case GlobalKind::kCodecsEncode: {
        // How protocol 2 pickles bytes: _codecs.encode(text, "latin1").
        if (newobj || a.size() != 2 || a[0]->kind != Kind::kStr || a[1]->kind != Kind::kStr ||
            (a[1]->s != "latin1" && a[1]->s != "latin-1")) {
          return arity("a str and \"latin1\"");
        }
        std::string out;
        const std::string& s = a[0]->s;
        for (std::size_t i = 0; i < s.size();) {
          const auto c = static_cast<unsigned char>(s[i]);
          if (c < 0x80) {
            out += static_cast<char>(c);
            ++i;
          } else if ((c & 0xe0) == 0xc0 && c <= 0xc3 && i + 1 < s.size()) {
            out += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3f));
            i += 2;
          } else {
            return Corrupt("_codecs.encode: a character beyond latin-1");
          }
        }
        return MakeStr(out, true);
      }
      case GlobalKind::kBytearray: {
        if (newobj || a.size() > 1 || (a.size() == 1 && a[0]->kind != Kind::kBytes)) return arity("none, or bytes");
        return MakeStr(a.empty() ? std::string_view() : std::string_view(a[0]->s), true);
      }
      case GlobalKind::kSet: {
        if (newobj || a.size() > 1 ||
            (a.size() == 1 && a[0]->kind != Kind::kList && a[0]->kind != Kind::kTuple && a[0]->kind != Kind::kSet)) {
          return arity("none, or a list");
        }
        TS_ASSIGN_OR_RETURN(Value * s, New(Kind::kSet));
        if (a.size() == 1) {
          for (Value* item : a[0]->items) TS_RETURN_IF_ERROR(AddToSet(s, item));
        }
        return s;
      }
      case GlobalKind::kComplex: {
        if (newobj || a.empty() || a.size() > 2) return arity("a real and an imaginary part");
        double parts[2] = {0, 0};
        for (std::size_t i = 0; i < a.size(); ++i) {
          if (a[i]->kind == Kind::kFloat) {
            parts[i] = a[i]->re;
          } else if (a[i]->kind == Kind::kInt || a[i]->kind == Kind::kBool) {
            parts[i] = static_cast<double>(a[i]->i);
          } else {
            return Corrupt("complex() of " + std::string(KindText(*a[i])));
          }
        }
        TS_ASSIGN_OR_RETURN(Value * c, New(Kind::kComplex));
        c->re = parts[0];
        c->im = parts[1];
        return c;
      }
      default:
        break;
    }
    return Refuse(std::string(newobj ? "instantiating " : "calling ") + name + " is not supported");
  }

  Status Build(Value* inst, Value* state) {
    // torch's unpickler lets BUILD set attributes of an OrderedDict (a
    // state_dict's _metadata, the modules' versions): accepted, dropped.
    if (inst->kind == Kind::kDict) {
      if (state->kind != Kind::kDict && state->kind != Kind::kNone && state->kind != Kind::kTuple) {
        return Corrupt("the state of a dict is " + std::string(KindText(*state)));
      }
      return Status::OK();
    }
    return Refuse("BUILD of " + std::string(KindText(*inst)) + " is not supported (only a dict's attributes are)");
  }

  Status Step() {
    switch (op_) {
      case 0x80: {  // PROTO
        TS_ASSIGN_OR_RETURN(std::uint64_t v, Fixed(1));
        if (v > 5) return Refuse("pickle protocol " + N(v) + " (at most 5 exists)");
        return Status::OK();
      }
      case 0x95: {  // FRAME: a buffering hint; its length must fit
        TS_ASSIGN_OR_RETURN(std::uint64_t n, Fixed(8));
        if (n > b_.size() - pos_) return Corrupt("a frame of " + N(n) + " bytes, " + N(b_.size() - pos_) + " remain");
        return Status::OK();
      }
      case '(':  // MARK
        if (marks_.size() >= u_.limits_.max_depth) {
          return LimitExceeded(At() + "more than " + N(u_.limits_.max_depth) + " MARKs open (Limits::max_depth)");
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
      case 0x88: case 0x89: {  // NEWTRUE, NEWFALSE
        TS_ASSIGN_OR_RETURN(Value * v, New(Kind::kBool));
        v->i = op_ == 0x88;
        return Push(v);
      }
      case 'J': {  // BININT
        TS_ASSIGN_OR_RETURN(std::uint64_t v, Fixed(4));
        TS_ASSIGN_OR_RETURN(Value * x, MakeInt(static_cast<std::int32_t>(static_cast<std::uint32_t>(v))));
        return Push(x);
      }
      case 'K': case 'M': {  // BININT1, BININT2
        TS_ASSIGN_OR_RETURN(std::uint64_t v, Fixed(op_ == 'K' ? 1 : 2));
        TS_ASSIGN_OR_RETURN(Value * x, MakeInt(static_cast<std::int64_t>(v)));
        return Push(x);
      }
      case 0x8a: case 0x8b: {  // LONG1, LONG4
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
      case 'X': case 0x8c: case 0x8d:    // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
      case 'U': case 'T':                // SHORT_BINSTRING, BINSTRING (Python 2 str, read as UTF-8 text)
      case 'B': case 'C': case 0x8e: case 0x96: {  // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
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
      case ']': case '}': case 0x8f: {  // EMPTY_LIST, EMPTY_DICT, EMPTY_SET
        TS_ASSIGN_OR_RETURN(Value * x, New(op_ == ']' ? Kind::kList : op_ == '}' ? Kind::kDict : Kind::kSet));
        return Push(x);
      }
      case 't': case 'l': {  // TUPLE, LIST
        TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
        TS_RETURN_IF_ERROR(CheckItems(items.size()));
        TS_ASSIGN_OR_RETURN(Value * x, New(op_ == 't' ? Kind::kTuple : Kind::kList));
        x->items = std::move(items);
        return Push(x);
      }
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        const std::size_t n = op_ - 0x84;
        if (stack_.size() < Floor() + n) {
          return Corrupt("needs " + N(n) + " values on the stack, " + N(stack_.size() - Floor()) + " are there");
        }
        TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kTuple));
        x->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        return Push(x);
      }
      case 'd': {  // DICT
        TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
        if (items.size() % 2) return Corrupt("an odd number of values (" + N(items.size()) + ") for key/value pairs");
        TS_ASSIGN_OR_RETURN(Value * d, New(Kind::kDict));
        for (std::size_t i = 0; i < items.size(); i += 2) TS_RETURN_IF_ERROR(SetItem(d, items[i], items[i + 1]));
        return Push(d);
      }
      case 'a': {  // APPEND
        TS_ASSIGN_OR_RETURN(Value * item, Pop());
        TS_ASSIGN_OR_RETURN(Value * list, Top());
        if (list->kind != Kind::kList) return Refuse("APPEND applies to lists, the target is " + std::string(KindText(*list)));
        TS_RETURN_IF_ERROR(CheckItems(list->items.size() + 1));
        list->items.push_back(item);
        return Status::OK();
      }
      case 'e': {  // APPENDS
        TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
        TS_ASSIGN_OR_RETURN(Value * list, Top());
        if (list->kind != Kind::kList) return Refuse("APPENDS applies to lists, the target is " + std::string(KindText(*list)));
        TS_RETURN_IF_ERROR(CheckItems(list->items.size() + items.size()));
        list->items.insert(list->items.end(), items.begin(), items.end());
        return Status::OK();
      }
      case 0x90: {  // ADDITEMS
        TS_ASSIGN_OR_RETURN(std::vector<Value*> items, PopMark());
        TS_ASSIGN_OR_RETURN(Value * set, Top());
        if (set->kind != Kind::kSet) return Refuse("ADDITEMS applies to sets, the target is " + std::string(KindText(*set)));
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
        if (items.size() % 2) return Corrupt("an odd number of values (" + N(items.size()) + ") for key/value pairs");
        for (std::size_t i = 0; i < items.size(); i += 2) TS_RETURN_IF_ERROR(SetItem(d, items[i], items[i + 1]));
        return Status::OK();
      }
      case 'q': case 'r': {  // BINPUT, LONG_BINPUT
        TS_ASSIGN_OR_RETURN(std::uint64_t k, Fixed(op_ == 'q' ? 1 : 4));
        return Put(k);
      }
      case 0x94:  // MEMOIZE
        return Put(memo_.size());
      case 'h': case 'j': {  // BINGET, LONG_BINGET
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
        if (cls->kind != Kind::kGlobal) return Refuse("instantiates " + std::string(KindText(*cls)) + ", not an allowed class");
        TS_ASSIGN_OR_RETURN(Value * r, Call(cls->g, args, true));
        return Push(r);
      }
      case 'b': {  // BUILD
        TS_ASSIGN_OR_RETURN(Value * state, Pop());
        TS_ASSIGN_OR_RETURN(Value * inst, Top());
        return Build(inst, state);
      }
      case 'Q': {  // BINPERSID
        TS_ASSIGN_OR_RETURN(Value * pid, Pop());
        TS_ASSIGN_OR_RETURN(Value * s, PersistentLoad(pid));
        return Push(s);
      }
      default:
        break;
    }
    if (OpcodeName(op_).empty()) return Corrupt("not an opcode of any pickle protocol");
    return Refuse("the opcode is not allowed: " + std::string(RefusedWhy(op_)));
  }

  Status PushGlobal(std::string_view module, std::string_view name) {
    if (!IsValidUtf8(module) || !IsValidUtf8(name)) return Corrupt("a global whose name is not UTF-8");
    auto g = ResolveGlobal(module, name);
    if (!g.ok()) return Unsupported(At() + g.status().message());
    TS_ASSIGN_OR_RETURN(Value * v, New(Kind::kGlobal));
    v->g = *g;
    return Push(v);
  }

  Unpickler& u_;
  std::span<const std::byte> b_;
  std::size_t start_, pos_, op_at_ = 0;
  std::uint8_t op_ = 0;
  std::vector<Value*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Value*> memo_;
};

Result<Value*> Unpickler::Load(std::size_t pos, std::size_t* end) {
  Run run(*this, pos);
  return run.Go(end);
}

}  // namespace tensorsafe::pytorch::internal
