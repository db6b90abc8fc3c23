// Property checks behind the libFuzzer targets in fuzz/ (one target per
// parser, STYLE.md "Tests"). Each function takes untrusted bytes, exercises a
// parser or a writer/reader pair with them, and aborts with a message on
// stderr when a property fails (a crash for libFuzzer, a failed test for the
// replay driver). Errors the library reports (Status) are expected outcomes,
// never failures. The same functions run in ctest through fuzz/replay_main.cc,
// so a regression file fails `make test` without libFuzzer.
//
// Thread safety: the functions share no state except a per-process temp
// directory (CheckTsafeUpdate); call them from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tensorsafe::fuzz {

// Must-not-crash targets: decode, read everything (every tensor, metadata,
// slices), verify, and check that the different read paths agree.
//
// Native .tsafe: mapped (OpenBuffer) vs pread reads, eager vs lazy index
// checks, hash lookup vs sequential scan; when the index verifies, Find()
// agrees with ForEach() for every name and Verify()'s damaged list is exactly
// the tensors whose ReadInto(verify) fails.
void CheckTsafe(std::span<const std::byte> data);
// The input as a file opened by the Updater: when the file verifies, a
// transaction (add, replace, rename, remove, metadata) commits and the result
// verifies and matches a model; Compact() keeps the contents.
void CheckTsafeUpdate(std::span<const std::byte> data);
// Foreign codecs: decode; every tensor's data has the dense size of its dtype
// and shape and every byte is readable; metadata is JSON; a decoded set that
// re-encodes decodes to the same set.
void CheckSafetensors(std::span<const std::byte> data);
void CheckNpy(std::span<const std::byte> data);
void CheckNpz(std::span<const std::byte> data);
void CheckGguf(std::span<const std::byte> data);
// GGUF block decoding (gguf_quants_checks.cc): every tensor of a GGUF file
// that decodes is dequantised to f32, f16 and bf16 without crashing, the
// f16/bf16 results equal to the f32 one rounded (cast.h), and quantised back.
void CheckGgufQuants(std::span<const std::byte> data);
void CheckTenbin(std::span<const std::byte> data);
void CheckBtf(std::span<const std::byte> data);
void CheckZio(std::span<const std::byte> data);
// PyTorch checkpoints (pytorch_checks.cc): a zip archive or legacy stream
// is decoded whole; any other input is taken as the object pickle, run by
// the restricted unpickler, and decoded again inside a zip archive and a
// legacy stream built around it with every storage it declares. Decoding
// never reports I/O or internal errors, refuses nothing with an unexpected
// code, and what it accepts satisfies the set invariants; the same input
// decodes the same way twice; checking CRCs only ever adds refusals.
void CheckPytorch(std::span<const std::byte> data);
// DCP's pickled `.metadata` (DcpMetadataJson): errors are corruption,
// refusal or a limit and name the file; two reads agree; what it accepts
// has every chunk inside its tensor and every path inside the directory.
void CheckDcpMetadata(std::span<const std::byte> data);

// The stream decoders (docs/STREAM.md): the input as one native message
// (DecodeMessage, at an aligned and at an unaligned address: views vs
// copies), and as a byte stream read by StreamReader (native or tenbin wire,
// detected). Whatever decodes satisfies the set invariants, re-encodes
// (EncodeMessage) and decodes back to the same set; the aligned and
// unaligned decodes agree; a stream stops at its first error.
void CheckStream(std::span<const std::byte> data);

// Round-trip targets: build tensors from the input (dtypes, shapes, names,
// metadata, strided views, chunked streaming), write them, read them back,
// compare exactly.
void RoundTripTsafe(std::span<const std::byte> data);
void RoundTripSafetensors(std::span<const std::byte> data);
void RoundTripNpy(std::span<const std::byte> data);
void RoundTripTenbin(std::span<const std::byte> data);
// gguf, btf, zio and npz in one target (the input's first byte picks one).
void RoundTripOtherCodecs(std::span<const std::byte> data);

}  // namespace tensorsafe::fuzz
