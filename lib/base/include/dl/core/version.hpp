// What this build is: version and git revision (for --version and the environment snapshot in
// every run directory). The libraries compiled in: dl/backend/build_info.hpp.
#pragma once
#include <string>

namespace dl {

std::string version_string();  // "0.1.0 (git 3c79c4a)"

}  // namespace dl
