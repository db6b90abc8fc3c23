#include "io/pieces.h"

#include "io/atomic_file.h"

namespace tensorsafe::internal {

std::size_t Pieces::Append(std::string bytes) {
  size_ += bytes.size();
  owned_.push_back(std::move(bytes));
  pieces_.push_back(Piece{true, owned_.size() - 1, {}});
  return owned_.size() - 1;
}

void Pieces::AppendView(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  size_ += bytes.size();
  pieces_.push_back(Piece{false, 0, bytes});
}

void Pieces::AppendZeros(std::uint64_t n) {
  if (n > 0) Append(std::string(static_cast<std::size_t>(n), '\0'));
}

std::span<const std::byte> Pieces::BytesOf(const Piece& p) const {
  return p.is_owned ? AsByteSpan(owned_[p.owned_index]) : p.view;
}

std::string Pieces::Join() const {
  std::string out;
  out.reserve(static_cast<std::size_t>(size_));
  for (const Piece& p : pieces_) {
    const auto b = BytesOf(p);
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return out;
}

Status Pieces::WriteTo(WritableFile& file) const {
  // Pieces below 64 KiB go through the buffer (one write per MiB, not per
  // header); larger ones are written from where they are, which for a mapped
  // source means straight from the page cache.
  constexpr std::size_t kSmall = std::size_t{64} << 10;
  constexpr std::size_t kBuffer = std::size_t{1} << 20;
  std::vector<std::byte> buf;
  auto flush = [&]() -> Status {
    if (buf.empty()) return Status::OK();
    Status s = file.Append(buf);
    buf.clear();
    return s;
  };
  for (const Piece& p : pieces_) {
    const auto b = BytesOf(p);
    if (b.size() < kSmall) {
      buf.insert(buf.end(), b.begin(), b.end());
      if (buf.size() >= kBuffer) TS_RETURN_IF_ERROR(flush());
      continue;
    }
    TS_RETURN_IF_ERROR(flush());
    TS_RETURN_IF_ERROR(file.Append(b));
  }
  return flush();
}

Status WritePiecesAtomically(const std::string& path, const Pieces& pieces, bool sync, Env* env) {
  return WriteAtomically(path, sync, env, [&](WritableFile& f) { return pieces.WriteTo(f); });
}

}  // namespace tensorsafe::internal
