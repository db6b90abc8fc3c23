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

}  // namespace tensorsafe::cli
