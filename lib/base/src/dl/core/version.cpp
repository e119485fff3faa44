#include "dl/core/version.hpp"

namespace dl {

std::string version_string() {
  std::string rev = DL_GIT_REV;
  return std::string(DL_VERSION) + (rev.empty() ? "" : " (git " + rev + ")");
}

}  // namespace dl
