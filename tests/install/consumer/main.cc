// A project outside the tree that finds the installed package, writes a file
// and reads it back: proof that `cmake --install` gives a usable library.
#include <cstdio>
#include <string>

#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string path = argv[1];
  auto w = tensorsafe::Writer::Create(path);
  if (!w.ok()) return 1;
  const float v[2] = {1, 2};
  auto view = tensorsafe::TensorView::Contiguous(tensorsafe::DType::kF32, {2}, std::as_bytes(std::span(v)));
  if (!(*w)->Add("v", view).ok() || !(*w)->Finish().ok()) return 1;
  auto r = tensorsafe::Reader::Open(path);
  if (!r.ok() || (*r)->size() != 1 || !(*r)->Verify().ok()) return 1;
  std::printf("consumer: wrote and read back %s\n", path.c_str());
  return 0;
}
