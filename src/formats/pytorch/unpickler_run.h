// One pickle.load() of the restricted unpickler (pickle.h): its stack,
// marks and memo. The opcode loop is unpickler.cc; what the allowed torch
// globals build (storages, tensors, the few callables) is rebuild.cc.
#pragma once

#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/pytorch/pickle.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::pytorch::internal {

using tensorsafe::internal::Str;
// "BINPUT (0x71)", or "byte 0xff (no opcode)", for messages.
std::string OpLabel(std::uint8_t op);
bool IsStrLike(const Value* v);

class Unpickler::Run {
 public:
  Run(Unpickler& u, std::size_t pos) : u_(u), b_(u.bytes_), start_(pos), pos_(pos) {}

  Result<Value*> Go(std::size_t* end) {
    for (;;) {
      if (pos_ >= b_.size()) return Corrupt("the pickle ends before its STOP opcode");
      if (pos_ - start_ >= u_.limits_.max_pickle_bytes) {
        return LimitExceeded(u_.where_ + ": the pickle is longer than " + Str(u_.limits_.max_pickle_bytes) +
                             " bytes (Limits::max_pickle_bytes)");
      }
      op_at_ = pos_;
      op_ = static_cast<std::uint8_t>(b_[pos_++]);
      if (op_ == '.') {
        if (!marks_.empty()) return Corrupt("STOP with " + Str(marks_.size()) + " MARK(s) still open");
        if (stack_.size() != 1) {
          return Corrupt("STOP with " + Str(stack_.size()) + " values on the stack (torch.save leaves exactly one)");
        }
        *end = pos_;
        return stack_[0];
      }
      TS_RETURN_IF_ERROR(Step());
    }
  }

 private:
  // --- errors --------------------------------------------------------------
  std::string At() const { return u_.where_ + ": offset " + Str(op_at_) + ": " + OpLabel(op_) + ": "; }
  Status Corrupt(const std::string& msg) const { return Corruption(At() + msg); }
  Status Refuse(const std::string& msg) const { return Unsupported(At() + msg); }

  // --- reading operands ----------------------------------------------------
  Status Need(std::uint64_t n) const {
    if (n > b_.size() - pos_) {
      return Corrupt("needs " + Str(n) + " operand bytes, " + Str(b_.size() - pos_) + " remain (truncated)");
    }
    return Status::OK();
  }
  Result<std::uint64_t> Fixed(int n) {
    TS_RETURN_IF_ERROR(Need(n));
    const std::byte* p = b_.data() + pos_;
    pos_ += n;
    switch (n) {
      case 1: return static_cast<std::uint8_t>(p[0]);
      case 2: return tensorsafe::internal::Load16(p);
      case 4: return tensorsafe::internal::Load32(p);
      default: return tensorsafe::internal::Load64(p);
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
      return LimitExceeded(At() + "a container of " + Str(n) + " items, more than " +
                           Str(u_.limits_.max_container_items) + " (Limits::max_container_items)");
    }
    return Status::OK();
  }

  Result<Value*> MakeInt(std::int64_t v) {
    TS_ASSIGN_OR_RETURN(Value * x, New(Kind::kInt));
    x->i = v;
    return x;
  }
  Result<Value*> MakeStr(std::string_view s, bool bytes) {
    if (!bytes && !tensorsafe::internal::IsValidUtf8(s)) return Corrupt("the string is not valid UTF-8");
    TS_ASSIGN_OR_RETURN(Value * x, New(bytes ? Kind::kBytes : Kind::kStr));
    x->s.assign(s);
    return x;
  }
  // Two's complement little-endian, as pickle's decode_long.
  Result<Value*> MakeLong(std::string_view raw);

  // --- memo ----------------------------------------------------------------
  Status Put(std::uint64_t key);
  Status Get(std::uint64_t key);

  // --- containers ----------------------------------------------------------
  Status SetItem(Value* d, Value* k, Value* v);
  Status AddToSet(Value* s, Value* item);
  // SETITEM/SETITEMS apply to dicts only (CVE-2026-24747: torch's unpickler
  // once let them write into other objects).
  Status NeedDict(Value* d, std::string_view what) const;

  // --- storages and tensors ------------------------------------------------
  Result<std::string> KeyOf(const Value* v, std::string_view what) const;

  // BINPERSID: ("storage", storage type, key, location, numel[, view]).
  Result<Value*> PersistentLoad(Value* pid);

  Result<std::size_t> Declare(const std::string& key, std::uint16_t type, std::uint64_t numel, std::uint64_t nbytes,
                              const std::string& location);

  Result<std::vector<std::uint64_t>> Dims(const Value* v, std::string_view what) const;

  // _rebuild_tensor(storage, offset, size, stride) and its v2/v3 forms: the
  // geometry torch's set_() accepts, checked against the storage.
  Result<Value*> RebuildTensor(GlobalKind kind, const std::vector<Value*>& a);

  // A callable global applied to `args` (REDUCE), or a class instantiated
  // (NEWOBJ). Each case is the whole of what that global may do here.
  Result<Value*> Call(const Global& g, Value* args_tuple, bool newobj);

  Status Build(Value* inst, Value* state);

  Status Step();

  Status PushGlobal(std::string_view module, std::string_view name);

  Unpickler& u_;
  std::span<const std::byte> b_;
  std::size_t start_, pos_, op_at_ = 0;
  std::uint8_t op_ = 0;
  std::vector<Value*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Value*> memo_;
};

}  // namespace tensorsafe::pytorch::internal
