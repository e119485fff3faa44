#include "dl/core/error.hpp"

namespace dl {

int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::runtime: return kExitFailure;
    case ErrorKind::usage: return kExitUsage;
    case ErrorKind::diverged: return kExitDiverged;
    case ErrorKind::interrupted: return kExitInterrupted;
  }
  return kExitFailure;
}

}  // namespace dl
