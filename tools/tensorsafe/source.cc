#include "source.h"

namespace tensorsafe::cli {

void AddFormatOption(CLI::App& sub, const std::string& flag, Format* format, const std::string& help) {
  sub.add_option_function<std::string>(
         flag,
         [format](const std::string& name) {
           auto f = ParseFormat(name);
           if (!f) throw CLI::ValidationError("unknown format \"" + name + "\" (" + FormatList() + ")");
           *format = *f;
         },
         help + " (" + FormatList() + ")")
      ->type_name("FMT");
}

void AddFileOptions(CLI::App& sub, std::string* path, Format* from) {
  sub.add_option("FILE", *path, "Tensor file in any supported format, or a sharded checkpoint's index or directory")
      ->required();
  AddFormatOption(sub, "--from", from, "Read FILE as this format instead of detecting it");
}

}  // namespace tensorsafe::cli
