// Fuzz properties of the dataset layer's parsers (docs/SECURITY.md, "How it
// is tested"): the sampler state JSON, the remote names and base URLs of the
// shard cache; and the ShardSource contract every kind of shard shares
// (CheckSourceSamples, used by the shard targets). Same contract as fuzz_checks.h: a failed property aborts with
// a message; a Status from the library is an expected outcome.
//
// Thread safety: CheckRemoteName keeps one ShardCache in a per-process temp
// directory; call the functions from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/sample.h"

namespace tensorsafe::fuzz {

// DecodeSamplerState over the input as text: no crash; what decodes
// re-encodes to canonical text that decodes to the same state and encodes to
// the same text again. Then a state built from the input's bytes (in and out
// of the decoder's ranges): decode(encode(x)) == x whenever every field is in
// range, else a kInvalidArgument.
void CheckSamplerState(std::span<const std::byte> data);

// The input as a relative name (and, after a first '\n', as "base URL\nname"):
// ValidateRelativeName agrees with an independent model of its rule
// (remote.h); an accepted name gives a URL that is the base URL followed by
// the name, and a local path that is a direct child of <cache>/files/ whose
// last part is not "." or ".."; a rejected name makes UrlFor and LocalPathFor
// fail with kInvalidArgument. A base URL that parses is normalized
// idempotently.
void CheckRemoteName(std::span<const std::byte> data);

// Reads every sample of `source` (any ShardSource: native, MDS, WebDataset)
// and checks each view: one per schema field with spec == &schema().fields[k];
// bytes in bounds (every byte is read, so ASan sees an overrun); int and
// float fields 8 bytes; tensors of the schema's rank, its fixed dims, and
// exactly the bytes their dtype and shape imply. Read(num_samples()) must be
// kOutOfRange. Returns one line per sample ("ok <digest>" or the error) so
// two read paths can be compared. `max_samples` bounds the work.
std::vector<std::string> CheckSourceSamples(const dataset::ShardSource& source, std::string_view what,
                                            std::uint64_t max_samples = 1u << 16);

}  // namespace tensorsafe::fuzz
